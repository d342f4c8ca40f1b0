"""Unit tests of the interaction coordinator's pure core."""
