"""Shared helpers below every room: small, dependency-free pieces that several stages need the same way."""
