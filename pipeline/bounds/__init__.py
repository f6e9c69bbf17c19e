"""What every rung is held to: the seed's calibrated cut-points (`thresholds`), the checks
on a policy value (`validation`) and who may overrule whom (`authority`). It imports only
`errors`; every room above may read it.
"""
