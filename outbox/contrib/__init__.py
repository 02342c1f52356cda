"""Integrations with frameworks: each subpackage imports its framework only when used."""
