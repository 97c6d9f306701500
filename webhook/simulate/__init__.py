"""What `allot simulate` writes besides text: PNG charts and the self-contained HTML report."""
