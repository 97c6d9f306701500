"""Running policy test files: discovery, the shared policy sets, and the text/JUnit/coverage report."""
