"""What keeps a score from being trusted where it should not be: the fitted domain, the
answer's familiarity and language, the work a candidate may cost (`admission`) and which
context the candidate cannot forge (`provenance`). It may import `encoding`, `bounds` and
`claims`.
"""
