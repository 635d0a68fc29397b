"""Shared helpers for the fleetc test suite."""
