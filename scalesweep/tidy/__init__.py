"""Parsed runs -> the tidy tables, runs.csv and epochs.csv: the one model of the runs table
(table.py: its columns, reading it back, its group keys), the rows, provenance and copies. Imports
the contract, the plan and the logs."""
