"""Proofs of the contract: a model-based test of the store, faults inside transactions,
network partitions between real hosts, and fuzzing of every entry point."""
