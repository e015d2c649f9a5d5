"""Helpers shared by the tests (tiny models, data, launches); conftest.py holds only fixtures and session settings."""
