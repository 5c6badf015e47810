"""The pure JSON algebra: canonical encoding, paths, selection, merge, diff, op batches.

Nothing in this package does I/O, reads a clock or keeps global state.
"""
