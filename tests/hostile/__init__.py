"""Hostile inputs and faults (issue 8): every case exits 2 with one line, no traceback."""
