"""The decision trail: what a rung decides (`verdict`), its hash-chained decision record and
its capped evidence, the outcome ledger, the public projection, the audit chain and
replay's pure half. It may import `scores` and every room below it, never a rung.
"""
