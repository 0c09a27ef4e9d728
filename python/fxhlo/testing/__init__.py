"""Test helpers: ``fxhlo.testing.xla`` parses, verifies and executes fxhlo's StableHLO with XLA."""
