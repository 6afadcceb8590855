"""Helpers for the kit's tests and benchmarks, kept out of the product package `pikit`."""
