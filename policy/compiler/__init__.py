"""IR -> decision code: the ordered compiler passes, expression code generation and the per-request pipeline."""
