"""Translating documents, not only lines: sentences split and put back, around any translator.

Every translator this package runs was trained on single sentences (or
verses), and a paragraph given whole comes back with sentences dropped.
`sentences` finds a text's sentences (and cuts one too long for the model
at its clauses); `paragraphs` splits a batch of texts into those units,
and puts their translations, n-best lists and alignments back together
with the source's own whitespace. `TextTranslator` and the server use it
by default; nothing here imports a translator.
"""
