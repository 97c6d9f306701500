"""Policy test cases: the `*.test.yaml` schema, running a case, comparing decisions, applying patches."""
