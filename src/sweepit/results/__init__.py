"""What sweeps leave behind and how it is read: result.json and metrics.jsonl, sweep.json, tables, reports."""
