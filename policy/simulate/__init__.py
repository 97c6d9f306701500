"""`allot simulate`: replay a trace of pod arrivals and departures through the Engine and a scheduler model.

Pure (no I/O, no clock): traces come in as text, time is the trace's. See docs/simulate.md.
"""
