"""The embedded demo: a 256-node cluster and the scripted reviews `allot demo` sends."""
