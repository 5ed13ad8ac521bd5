"""HTML documents: every text translated, every tag, attribute, comment and untouched element kept.

The translators here are honest fakes: one upper-cases each text word by
word (each word aligned to itself), one writes the words backwards (word
i aligned to word n-1-i), so a test can see where an inline tag went.
"""



import lxml.html
import pytest

from keras_transformer_runtime.documents.html_text import HtmlError
from keras_transformer_runtime.documents.html_text import html_passages
from keras_transformer_runtime.documents.html_text import parse_html
from keras_transformer_runtime.documents.html_text import translate_html

PAGE = """<!DOCTYPE html>
<html lang="es">
<head><meta charset="utf-8"><title>La creación</title>
<style>p { content: "Sea la luz"; }</style>
<script>var luz = "Sea la luz";</script></head>
<body>
<h1 id="top" class="a b">En el principio</h1>
<p class="v">Y dijo Dios: Sea la <b>luz</b>; y fue <a href="/buena?x=1&amp;y=2" title="bien">la luz</a>.</p>
<ul><li>Y llamó Dios a la luz <em>Día</em>.</li><li>Ver <code>sea_luz()</code> y más &amp; más.</li></ul>
<p translate="no">Sea la luz.</p>
<pre>  Sea la luz.
  Y fue la luz.</pre>
<div>Texto suelto <p>Y fue la tarde.</p> y más texto</div>
<!-- un comentario -->
<p>Línea uno<br>línea dos &lt;b&gt; &eacute;</p>
<img src="luz.png" alt="La luz">
</body></html>
"""


class Upper:
    """Upper-cases each text, each word aligned to itself; records what it was given."""

    def __init__(self):
        self.given = []

    def __call__(self, texts):
        self.given.extend(texts)
        return [(text.upper(), [(i, i) for i in range(len(text.split()))]) for text in texts]


def backwards(texts):
    """Each text's words backwards, word i aligned to word n-1-i."""
    results = []
    for text in texts:
        words = text.split()
        results.append((" ".join(reversed(words)), [(len(words) - 1 - j, j) for j in range(len(words))]))
    return results


def _translated(page, translate):
    return "".join(piece for piece, _ in translate_html(page, translate))


def _elements(html):
    root, _ = parse_html(html)
    return [(element.tag, dict(element.attrib)) for element in root.iter() if isinstance(element.tag, str)]


pytestmark = pytest.mark.backend_independent


def test_every_tag_and_attribute_is_kept_in_order_and_the_doctype_and_comment_too():
    output = _translated(PAGE, Upper())
    assert _elements(output) == _elements(PAGE)
    assert output.startswith("<!DOCTYPE html>") and "<!-- un comentario -->" in output


def test_untouched_elements_are_byte_identical_and_never_reach_the_translator():
    upper = Upper()
    output = _translated(PAGE, upper)
    for kept in ('<script>var luz = "Sea la luz";</script>', '<style>p { content: "Sea la luz"; }</style>',
                 '<p translate="no">Sea la luz.</p>', "<pre>  Sea la luz.\n  Y fue la luz.</pre>",
                 "<code>sea_luz()</code>"):
        assert kept in output
    assert not any("sea_luz" in text or "var luz" in text for text in upper.given)
    assert "Sea la luz." not in upper.given  # the translate="no" paragraph
    assert "<h1 id=\"top\" class=\"a b\">EN EL PRINCIPIO</h1>" in output


def test_a_block_is_one_text_and_its_inline_tags_wrap_the_words_they_covered():
    upper = Upper()
    output = _translated(PAGE, upper)
    assert "Y dijo Dios: Sea la luz; y fue la luz." in upper.given
    assert ('<p class="v">Y DIJO DIOS: SEA LA <b>LUZ</b>; Y FUE <a href="/buena?x=1&amp;y=2" title="bien">LA LUZ</a>.</p>'
            in output)


def test_an_inline_tag_follows_its_words_where_the_translation_moves_them():
    output = _translated('<p>uno dos <b class="x">tres cuatro</b></p>', backwards)
    assert output == '<p><b class="x">cuatro tres</b> dos uno</p>'
    # Nested tags stay nested, a void element stays where its share of the text puts it.
    output = _translated("<p>uno <b>dos <i>tres</i></b> cuatro<br>cinco</p>", backwards)
    root, _ = parse_html(output)
    bold = root.find(".//b")
    assert bold.find("i").text == "tres" and bold.text_content() == "tres dos"
    assert root.find(".//br") is not None and root.text_content().split() == ["cinco", "cuatro", "tres", "dos", "uno"]


def test_entities_are_read_as_characters_and_written_back_as_entities():
    upper = Upper()
    output = _translated("<p>Pan &amp; vino &lt;b&gt; &eacute;</p>", upper)
    assert upper.given == ["Pan & vino <b> é"]
    assert output == "<p>PAN &amp; VINO &lt;B&gt; É</p>"


def test_text_beside_blocks_is_translated_on_its_own():
    upper = Upper()
    output = _translated("<div>Texto suelto <p>Y fue.</p> y más</div>", upper)
    assert output == "<div>TEXTO SUELTO <p>Y FUE.</p> Y MÁS</div>"
    assert upper.given == ["Texto suelto", "Y fue.", "y más"]


def test_the_output_is_well_formed_and_reads_back_as_itself():
    output = _translated(PAGE, Upper())
    document = lxml.html.document_fromstring(output)
    again = lxml.html.tostring(document, doctype="<!DOCTYPE html>", encoding="unicode")
    assert _elements(again) == _elements(output)


def test_passages_are_counted_and_an_empty_page_stays_empty():
    pieces = list(translate_html(PAGE, Upper(), chunk=2))
    assert sum(count for _, count in pieces) == len(html_passages(PAGE)) and len(pieces) > 2
    assert list(translate_html(" \n", Upper())) == [(" \n", 0)] and html_passages("") == []


def test_html_that_cannot_be_read_is_a_clear_error():
    with pytest.raises(HtmlError, match="not HTML lxml can read"):
        parse_html("<!DOCTYPE html>")


@pytest.mark.end_to_end
def test_translate_input_html_keeps_the_markup_with_a_real_run(trained_run, tmp_path, capsys):
    from keras_transformer_cli import main

    page = tmp_path / "page.html"
    page.write_text(PAGE, encoding="utf-8")
    out = tmp_path / "out.html"
    assert main(["translate", "--model", str(trained_run), "--engine", "keras", "--input", str(page),
                 "--output", str(out)]) == 0
    output = out.read_text(encoding="utf-8")
    assert _elements(output) == _elements(PAGE)
    assert '<script>var luz = "Sea la luz";</script>' in output and "<code>sea_luz()</code>" in output
    assert "translated" in capsys.readouterr().err



def test_the_server_translates_html_pages_and_refuses_an_unreadable_one_alone():
    from tests.test_serving import _Reverser
    from tests.test_serving import _client
    from tests.test_serving import _served
    from tests.test_serving import _wait_ready

    with _client({"es-en": _served(_Reverser())}) as client:
        _wait_ready(client)
        response = client.post("/v1/translate", json={"text": ['<p class="x">ab <b>cd</b></p>', "<!DOCTYPE html>",
                                                               "<pre>ab</pre>"], "format": "html"})
        wrong = client.post("/v1/translate", json={"text": "<p>ab</p>", "format": "html", "n_best": 2})
    assert response.status_code == 200, response.text
    page, unreadable, untouched = response.json()["translations"]
    # _Reverser writes each sentence's characters backwards ("ab cd" -> "dc ba") and attends evenly: the <b>
    # goes to one word.
    assert page["hypotheses"][0]["text"] in ('<p class="x"><b>dc</b> ba</p>', '<p class="x">dc <b>ba</b></p>')
    assert page["format"] == "html"
    assert "not HTML lxml can read" in unreadable["error"]
    assert untouched["hypotheses"][0]["text"] == "<pre>ab</pre>"
    assert wrong.status_code == 400 and "'format': 'html'" in wrong.json()["error"]
