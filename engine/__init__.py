"""The engine runtime: the timer API over the store, and the single writer behind it."""
