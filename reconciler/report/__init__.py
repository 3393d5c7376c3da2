"""Rendering for people and tools: pure functions from models to strings. No I/O."""
