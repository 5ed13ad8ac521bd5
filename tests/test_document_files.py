"""Documents in files: plain text and SubRip translated with their structure kept, bad files refused in one line."""

import datetime
import re

import pytest
import srt

from keras_transformer_cli import build_parser
from keras_transformer_cli import commands
from keras_transformer_runtime.documents.files import file_kind
from keras_transformer_runtime.documents.files import read_document
from keras_transformer_runtime.documents.files import write_translated_document
from keras_transformer_runtime.documents.plain_text import translate_plain_text
from keras_transformer_runtime.documents.subtitles import translate_subtitles
from keras_transformer_runtime.errors import UserInputError

pytestmark = pytest.mark.backend_independent


def shout(texts):
    return [text.upper() for text in texts]


def test_plain_text_keeps_its_blank_lines_spaces_and_line_endings():
    text = "  Sea la luz.\r\nY fue.\r\n\r\n   \r\n\tFin.  \n\n"
    out = "".join(piece for piece, _ in translate_plain_text(text, shout))
    assert out == "  SEA LA LUZ.\r\nY FUE.\r\n\r\n   \r\n\tFIN.  \n\n"


def test_plain_text_hands_each_paragraph_over_whole_and_reports_them_done():
    seen, done = [], []
    text = "".join(f"Verso {i}. Otro.\n\n" for i in range(70))
    pieces = list(translate_plain_text(text, lambda texts: seen.append(texts) or shout(texts)))
    assert [len(call) for call in seen] == [64, 6] and seen[0][0] == "Verso 0. Otro."
    assert sum(units for _, units in pieces) == 70 and "".join(p for p, _ in pieces) == text.upper()


def _cue(index, start, end, content):
    return srt.Subtitle(index, datetime.timedelta(seconds=start), datetime.timedelta(seconds=end), content)


def test_subtitles_keep_every_cues_number_and_timing_and_translate_a_sentence_over_cues_whole():
    cues = [_cue(5, 1, 2.5, "Y dijo Dios:"), _cue(7, 3, 5, "Sea la luz,\ny fue la luz."), _cue(9, 6, 7, "¿Sí?")]
    document = srt.compose(cues, reindex=False)
    seen = []
    out = "".join(piece for piece, _ in translate_subtitles(
        document, lambda texts: seen.append(texts) or ["And God said: let there be light, and there was light.",
                                                       "Yes?"]))
    assert seen == [["Y dijo Dios: Sea la luz, y fue la luz.", "¿Sí?"]]  # the sentence whole, its cues joined
    translated = list(srt.parse(out))
    assert [(c.index, c.start, c.end) for c in translated] == [(c.index, c.start, c.end) for c in cues]
    assert translated[0].content == "And God said:"
    assert translated[1].content == "let there be light,\nand there was light."  # two lines, as the source cue
    assert translated[2].content == "Yes?"


@pytest.mark.parametrize("document, line", [
    ("1\n00:00:01,000 --> 00:00:02,000\nHola.\n\n2\n00:00:02 -> 00:00:03\nAdios.\n", 5),
    ("Hola, no soy SubRip.\n", 1),
])
def test_a_broken_cue_is_refused_naming_its_line(document, line):
    with pytest.raises(UserInputError, match=re.escape(f"is not SubRip (.srt) from line {line} on")):
        list(translate_subtitles(document, shout))


def test_an_interrupted_translation_keeps_what_it_had_written(tmp_path):
    text = "".join(f"Verso {i}.\n\n" for i in range(100))
    calls = []

    def translate(texts):
        calls.append(len(texts))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return shout(texts)

    path = tmp_path / "out.txt"
    with open(path, "w", encoding="utf-8") as out, pytest.raises(KeyboardInterrupt):
        write_translated_document(text, "txt", translate, out)
    assert path.read_text(encoding="utf-8") == "".join(f"VERSO {i}.\n\n" for i in range(63)) + "VERSO 63."


def test_the_kind_comes_from_the_extension_and_markup_not_read_yet_is_refused():
    assert file_kind("a.srt") == "srt" and file_kind("notes") == "txt" and file_kind("a.html", "txt") == "txt"
    assert file_kind("page.HTM") == "html" and file_kind("notes.markdown") == "md"
    with pytest.raises(UserInputError, match="not translated with their markup yet; --input-format txt"):
        file_kind("letter.docx")
    with pytest.raises(UserInputError, match="--input-format"):
        file_kind("data.xyz")


def test_bytes_that_are_not_utf8_are_refused_naming_the_byte_and_a_bom_is_dropped(tmp_path):
    (tmp_path / "latin.txt").write_bytes("Sea la luz.\nAñadió.".encode("latin-1"))
    with pytest.raises(UserInputError, match=r"not UTF-8 at byte 13 \(0xf1\)"):
        read_document(str(tmp_path / "latin.txt"))
    (tmp_path / "bom.txt").write_bytes("\ufeffHola.".encode("utf-8"))
    assert read_document(str(tmp_path / "bom.txt")) == "Hola."


class _Upper:
    tokenizer = None

    def __call__(self, texts, split_sentences=None, warn=True):
        return shout(texts)


def _translate(argv, capsys):
    args = build_parser().parse_args(["translate", "--model", "unused", *argv])
    status = commands.translate(args, __import__("sys").stdout)
    return status, capsys.readouterr()


def test_the_command_translates_a_file_into_a_file_and_an_empty_file_into_an_empty_one(tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.setattr(commands, "_translator", lambda args: _Upper())
    (tmp_path / "in.txt").write_text("Sea la luz.\n\nY fue.\n", encoding="utf-8")
    status, printed = _translate(["--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")], capsys)
    assert status == 0 and (tmp_path / "out.txt").read_text(encoding="utf-8") == "SEA LA LUZ.\n\nY FUE.\n"
    assert "translated 2 paragraphs" in printed.err
    (tmp_path / "empty.srt").write_text("", encoding="utf-8")
    status, printed = _translate(["--input", str(tmp_path / "empty.srt")], capsys)
    assert status == 0 and printed.out == ""


@pytest.mark.parametrize("flags, message", [
    (["--n-best", "2"], "--n-best belong to lines"),
    (["--format", "jsonl"], "--format jsonl belong to lines"),
    (["Hola."], "TEXT arguments belong to lines"),
])
def test_flags_for_lines_are_refused_with_a_file_before_the_model_loads(tmp_path, capsys, monkeypatch, flags,
                                                                        message):
    monkeypatch.setattr(commands, "_translator", lambda args: pytest.fail("the model was loaded"))
    (tmp_path / "in.txt").write_text("Hola.", encoding="utf-8")
    with pytest.raises(UserInputError, match=message):
        _translate(["--input", str(tmp_path / "in.txt"), *flags], capsys)


def test_output_without_input_and_output_over_input_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(commands, "_translator", lambda args: pytest.fail("the model was loaded"))
    (tmp_path / "in.txt").write_text("Hola.", encoding="utf-8")
    with pytest.raises(UserInputError, match="go with --input"):
        _translate(["--output", str(tmp_path / "out.txt"), "Hola."], capsys)
    with pytest.raises(UserInputError, match="is the --input file"):
        _translate(["--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "in.txt")], capsys)
    assert (tmp_path / "in.txt").read_text(encoding="utf-8") == "Hola."
