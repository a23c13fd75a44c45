"""Hostile inputs and faults: every case exits 2 with one line, no traceback."""
