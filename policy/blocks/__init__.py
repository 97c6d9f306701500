"""The decision code of each block kind: quota, priority, fraction, gang, agents, rules."""
