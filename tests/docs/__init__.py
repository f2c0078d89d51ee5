"""Tests of the documentation: the guides in docs/ run, and the API reference is current."""
