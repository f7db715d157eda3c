"""Rank-side public API: the watchdog controls and ranks_agree (imported inside ranks)."""
