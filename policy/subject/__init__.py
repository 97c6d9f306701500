"""What a request asks for: the normalized `Workload` subject, its GPU demand, and the dialect readers."""
