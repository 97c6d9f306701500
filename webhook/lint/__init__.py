"""`allot lint`: Kubernetes manifests as they sit in git, judged offline by the webhook's engine (docs/lint.md)."""
