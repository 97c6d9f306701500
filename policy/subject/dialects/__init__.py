"""Readers of each GPU dialect (whole GPUs, MIG, HAMi, KAI, DRA, gangs, topology) into subject fields."""
