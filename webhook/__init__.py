"""Allot's webhook, CLI and Kubernetes I/O; importing it gives the budget calendar its time zones (webhook/meter/zones.py)."""

from webhook.meter.zones import install as _install_zones

_install_zones()
