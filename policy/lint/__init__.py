"""Pure pieces of `allot lint`: which kinds a policy set governs, and where in a manifest a reason points."""
