"""Helpers the tests share that the product does not ship."""
