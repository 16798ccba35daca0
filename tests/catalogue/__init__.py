"""The transformers catalogue sweep (issue 17): shrink.py, harness.py, sweep.py, report.py."""
