"""Markdown documents: the words translated, everything else kept byte for byte (`documents.markdown_text`).

The fake translator upper-cases what it is given and records it. It is built
on the real machinery (`paragraphs.split_texts` with the `keep` patterns it
is passed, then `join_texts`), so Markdown's inline syntax reaches it as it
would reach a model: never.
"""

import re

import pytest
from markdown_it import MarkdownIt

from keras_transformer_runtime.documents import paragraphs
from keras_transformer_runtime.documents.markdown_text import INLINE_SYNTAX
from keras_transformer_runtime.documents.markdown_text import markdown_units
from keras_transformer_runtime.documents.markdown_text import translate_markdown

pytestmark = pytest.mark.backend_independent

MD = MarkdownIt("commonmark").enable("table")

DOCUMENT = """\
---
title: El libro
---
Título del libro
================

# Capítulo *uno* ##

Un párrafo con `código en línea` y
un [enlace](https://ejemplo.es/a_b "título") que sigue
en otra línea.  
Tras un salto duro\\
y otro.

- Elemento uno
  que sigue aquí
  - Elemento anidado con **fuerte**

    Segundo párrafo anidado
1. Primero con mi_valor_total
2. Segundo con _énfasis_ y ![un gato](img/gato.png)

> Cita línea uno
> cita línea dos
continuación perezosa
>
> - Lista en la cita

| Nombre | Valor `x` |
|:-------|----------:|
| Uno \\| dos | ![icono](i.png) |
| Tres | cuatro |

Ver [la guía][ref], [Los Términos] y <https://auto.ejemplo.es> con <span class="k">marca</span> &amp; más.

[ref]: https://ejemplo.es/guia
[los términos]: /terminos

    código indentado
    sin traducir

```python
def f(texto):  # no se traduce
    return texto
```

<div class="nota">
Bloque HTML sin traducir.
</div>
"""


class Upper:
    """A translator that upper-cases, keeping what `keep` matches as the real one does; records what it saw."""

    def __init__(self):
        self.texts, self.units, self.keeps = [], [], []

    def __call__(self, texts, keep=()):
        self.texts.append(list(texts))
        self.keeps.append(tuple(keep))
        split = paragraphs.split_texts(texts, "es", None, keep)
        units = paragraphs.units(split)
        self.units += units
        return paragraphs.join_texts(split, [unit.upper() for unit in units])


def translated(text, translate=None, chunk=64):
    return "".join(piece for piece, _ in translate_markdown(text, translate or Upper(), chunk))


def structure(text):
    return [(token.type, token.tag) for token in MD.parse(text)]


def rendered(text):
    return " ".join(MD.render(text).lower().split())


def test_a_document_keeps_its_structure_code_and_links_and_only_its_words_are_translated():
    translate = Upper()
    output = translated(DOCUMENT, translate)
    for kept in ["---\ntitle: El libro\n---\n", "================\n", " ##\n", "`código en línea`",
                 '](https://ejemplo.es/a_b "título")', "![un gato](img/gato.png)", "![icono](i.png)",
                 "|:-------|----------:|\n", "`x`", "\\|", "][ref]", "[Los Términos]", "<https://auto.ejemplo.es>",
                 '<span class="k">', "&amp;", "[ref]: https://ejemplo.es/guia\n[los términos]: /terminos\n",
                 "    código indentado\n    sin traducir\n",
                 "```python\ndef f(texto):  # no se traduce\n    return texto\n```\n",
                 '<div class="nota">\nBloque HTML sin traducir.\n</div>\n']:
        assert kept in output
    for words in ["TÍTULO DEL LIBRO\n", "# CAPÍTULO *UNO* ##", "UN PÁRRAFO CON `código en línea` Y UN [ENLACE]",
                  "QUE SIGUE EN OTRA LÍNEA.  \nTRAS UN SALTO DURO\\\nY OTRO.\n", "- ELEMENTO UNO QUE SIGUE AQUÍ\n",
                  "  - ELEMENTO ANIDADO CON **FUERTE**\n\n    SEGUNDO PÁRRAFO ANIDADO\n",
                  "1. PRIMERO CON MI_VALOR_TOTAL\n", "_ÉNFASIS_",
                  "> CITA LÍNEA UNO CITA LÍNEA DOS CONTINUACIÓN PEREZOSA\n>\n",
                  "> - LISTA EN LA CITA\n", "| NOMBRE | VALOR `x` |", "| UNO \\| DOS |", "| TRES | CUATRO |",
                  "VER [LA GUÍA][ref]", "MARCA</span> &amp; MÁS."]:
        assert words in output
    for unit in translate.units:
        assert "`" not in unit and "](" not in unit and "<" not in unit and "*" not in unit
    assert structure(output) == structure(DOCUMENT)
    assert rendered(output) == rendered(DOCUMENT)
    assert all(set(INLINE_SYNTAX) <= set(keep) for keep in translate.keeps)


def test_crlf_line_endings_and_a_missing_final_newline_survive():
    document = "# Título\r\n\r\nSea la\r\nluz.\r\n\r\n- uno\r\n\r\n```\r\nx = 1\r\n```\r\n\r\nFin."
    assert translated(document) == "# TÍTULO\r\n\r\nSEA LA LUZ.\r\n\r\n- UNO\r\n\r\n```\r\nx = 1\r\n```\r\n\r\nFIN."
    assert translated("Hola\n\n\n  \nadiós\n") == "HOLA\n\n\n  \nADIÓS\n"


def test_the_pieces_make_the_output_and_count_every_block_and_an_interrupted_run_keeps_what_it_wrote():
    whole = translated(DOCUMENT)
    pieces = list(translate_markdown(DOCUMENT, Upper(), chunk=1))
    assert "".join(piece for piece, _ in pieces) == whole
    assert markdown_units(DOCUMENT) == sum(units for _, units in pieces) == 14
    assert sum(1 for _, units in pieces if units) == 14
    translate = Upper()
    run = translate_markdown(DOCUMENT, translate, chunk=3)
    kept = next(run)[0] + next(run)[0]
    run.close()
    assert whole.startswith(kept) and "TÍTULO DEL LIBRO" in kept and len(translate.texts) == 2


@pytest.mark.parametrize("document", ["", "```\nnada = 0\n```\n", "    código\n", "<div>\nhola\n</div>",
                                      "\n\n", "[ref]: /a\n", "---\n\n***\n"])
def test_a_document_without_words_to_translate_comes_back_unchanged(document):
    translate = Upper()
    assert translated(document, translate) == document
    assert markdown_units(document) == 0
    assert all(texts == [] for texts in translate.texts)


# Each kind of inline syntax, in a sentence, and what the sentence becomes: the syntax exactly as it was.
SYNTAX = [
    ("`código`", "`código`"),
    ("``con ` dentro``", "``con ` dentro``"),
    ("![un gato](img/gato.png \"título\")", "![un gato](img/gato.png \"título\")"),
    ("![gato][ref]", "![gato][ref]"),
    ("[enlace](https://ejemplo.es/a_b)", "[ENLACE](https://ejemplo.es/a_b)"),
    ("[enlace](</con espacio> 'título')", "[ENLACE](</con espacio> 'título')"),
    ("[la guía][ref]", "[LA GUÍA][ref]"),
    ("<https://ejemplo.es>", "<https://ejemplo.es>"),
    ("<ana@ejemplo.es>", "<ana@ejemplo.es>"),
    ('<span class="k">marca</span>', '<span class="k">MARCA</span>'),
    ("<!-- nota -->", "<!-- nota -->"),
    ("&amp; &#169;", "&amp; &#169;"),
    ("*luz*", "*LUZ*"),
    ("**luz**", "**LUZ**"),
    ("_luz_", "_LUZ_"),
    ("__luz__", "__LUZ__"),
    ("~~luz~~", "~~LUZ~~"),
    ("\\*no\\*", "\\*NO\\*"),
    ("luz  \ny", "LUZ  \nY"),
    ("luz\\\ny", "LUZ\\\nY"),
]
# One span of each pattern of `INLINE_SYNTAX`, whole.
SPANS = ["\\*", "`código`", "![a](b.png)", "](https://ejemplo.es)", "][ref]", "[", "<https://ejemplo.es>",
         "&amp;", "**", "  "]


@pytest.mark.parametrize("syntax, expected", SYNTAX)
def test_each_inline_syntax_is_kept_exactly_and_never_translated(syntax, expected):
    translate = Upper()
    assert translated(f"Sea la {syntax} y fue.\n", translate) == f"SEA LA {expected} Y FUE.\n"
    assert not any(character in unit for unit in translate.units for character in "`*<>&[]\\~")


@pytest.mark.parametrize("pattern", INLINE_SYNTAX)
def test_every_inline_syntax_pattern_is_tested(pattern):
    assert any(re.fullmatch(pattern, span) for span in SPANS)


def test_snake_case_words_are_translated_as_words():
    translate = Upper()
    assert translated("Usa mi_valor_total y _otra_ cosa.\n", translate) == "USA MI_VALOR_TOTAL Y _OTRA_ COSA.\n"
    assert "Usa mi_valor_total y" in translate.units


def test_a_table_keeps_its_pipes_alignment_and_containers_and_escapes_a_pipe_a_translation_adds():
    document = "> | Uno | Dos |\n> |:---|---:|\n> | tres | |\n\nsin | borde\n--|--\na | b\n"
    assert translated(document) == "> | UNO | DOS |\n> |:---|---:|\n> | TRES | |\n\nSIN | BORDE\n--|--\nA | B\n"
    piped = translated(document, lambda texts, keep=(): [f"{text} | {text}\nmás" for text in texts])
    assert piped.startswith("> | Uno \\| Uno más | Dos \\| Dos más |\n> |:---|---:|\n")
    assert structure(piped) == structure(document)


def test_a_translation_never_adds_a_block_or_a_line():
    document = "Sea la\nluz.  \nY fue\nla luz.\n\n- uno\n\n> dos\n\nTítulo\n---\n\n1. tres\n"
    for answer in ["- 1. a\n# b\n===", "2. a  \n---", "", "  ", "# a  \n\n  \n===\n"]:
        output = translated(document, lambda texts, keep=(): [answer for _ in texts])
        assert structure(output) == structure(document), answer
        assert output.count("\n") <= document.count("\n")


@pytest.mark.end_to_end
def test_translate_input_markdown_keeps_code_and_links_with_a_real_run(trained_run, tmp_path, capsys):
    from keras_transformer_cli import main

    source = ("# En el principio\n\nY dijo Dios: `sea_luz()` y fue la [luz](https://example.org/luz).\n\n"
              "```python\nprint('Sea la luz')\n```\n\n- Y vió Dios **la luz**.\n")
    page = tmp_path / "doc.md"
    page.write_text(source, encoding="utf-8")
    out = tmp_path / "doc.en.md"
    assert main(["translate", "--model", str(trained_run), "--engine", "keras", "--input", str(page),
                 "--output", str(out)]) == 0
    output = out.read_text(encoding="utf-8")
    for kept in ("`sea_luz()`", "](https://example.org/luz)", "```python\nprint('Sea la luz')\n```", "**"):
        assert kept in output
    assert output.startswith("# ") and "\n- " in output
    assert "translated 3 blocks" in capsys.readouterr().err
