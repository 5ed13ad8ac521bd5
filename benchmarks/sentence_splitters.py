"""Two sentence segmenters, sentencex and pysbd: where they split the corpus' verses and a hand-made gold set, and how fast.

    python -m benchmarks.sentence_splitters --out benchmarks/results/cpu-sentence-splitters

Each segmenter is called as the project would call it, for character
offsets: `sentencex.get_sentence_boundaries(lang, text)` and
`pysbd.Segmenter(language=lang, clean=False, char_span=True).segment(text)`.
A boundary is the offset where a piece starts, moved past any whitespace
that opens it (so a boundary before or after the space between two
sentences is the same boundary); the offsets 0 and `len(text)` are none.

- The corpus' verses (`load_bible_pairs`, splits `test` and `heldout`):
  runs of 3 and of 6 consecutive verses of a split (in split order, not
  overlapping; the last run may be shorter) are joined with one space into
  a paragraph, the Spanish source and the first English reference apart.
  In `test` consecutive verses of the split are seldom neighbours in the
  Bible (the split is drawn verse by verse); `heldout` holds whole books.
  The gold boundaries are the joins after a verse that ends in `.`, `!`,
  `?` or `…` (possibly followed by closing quotes or brackets); recall is
  the share of them a segmenter finds at exactly that offset. A verse
  often holds several sentences, so a boundary inside a verse is not
  necessarily wrong: the rows count them (per 100 verses) to show how fine
  each segmenter splits, and count the splits at the other joins (after a
  verse that ends in `:`, `;`, `,`), and the missed gold joins that lie
  inside an unclosed quotation or bracket. A paragraph is lossless when its
  pieces, joined, give back the text and each piece's offsets point at it.
- A hand-made gold set (`GOLD`): short passages in es, en, de, fr, it,
  pt, ja, zh, hi, ar, ru, each given as its gold sentences (joined with a
  space, or with nothing in ja and zh), with abbreviations, decimals and
  times, ordinals, ellipses, quotations, URLs and e-mail addresses,
  initials, and sentences that end with a number. Boundary precision,
  recall and F1 per language and over all passages (pooled counts). A
  language that pysbd rejects is segmented with its English rules
  (`PYSBD_FALLBACK`), and the row says so; sentencex exposes no list of
  its languages and falls back by itself.
- Speed: characters per second over every Spanish verse of `test` in
  paragraphs of 6 (a warm-up pass, then `--repeats` passes, the
  segmenters in turn, median), and the import time of each package in a
  fresh interpreter (median of 3).

Every row carries `run` (the date it was measured); the `machine` row
names the CPU (`/proc/cpuinfo`, with or without avx512f), the package
versions and the date. Rows are added to `--out/results.json` and
`results.md` (`benchmarks.results_folder.add_rows`), a section a run.
`--limit N` takes the first N verses of each split: a smoke test.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_runtime.cpu import cpu_flags
from keras_transformer_runtime.cpu import cpu_model

SPLITS = ("test", "heldout")
VERSES_PER_PARAGRAPH = (3, 6)
#: Marks that end a sentence, and those that may follow them (closing quotes, brackets).
FINAL = ".!?…"
CLOSING = "”’\"')]»"
#: The code pysbd segments with where it rejects a language.
PYSBD_FALLBACK = "en"
#: How a language's gold sentences are joined into a passage (a space where not named).
JOINERS = {"ja": "", "zh": ""}

#: Hand-made passages, each as its gold sentences, by language.
GOLD = {
    "es": [
        ["El Sr. García llegó a las 10.30 de la mañana.", "La reunión empezó tarde."],
        ["La Dra. Pérez presentó la versión 3.5 del programa.", "Nadie hizo preguntas."],
        ["Trajimos fruta, p. ej. manzanas y peras, para el viaje.", "Nadie tenía hambre."],
        ["¿Vendrás mañana?", "¡Claro que sí!", "Te espero a las 9."],
        ["Esperé... y esperé, pero nadie vino.", "Al final me fui a casa."],
        ["Me preguntó: «¿Estás seguro?»", "No supe qué responder."],
        ["Consulte https://www.ejemplo.es/ayuda/index.html?tema=3 para más detalles.",
         "También puede escribir a soporte.tecnico@ejemplo.es sin coste."],
        ["J. R. R. Tolkien escribió El Señor de los Anillos.", "Se publicó entre 1954 y 1955."],
        ["El capítulo empieza en la pág. 23 y termina en la 41.", "Léelo antes del lunes."],
        ["Compramos pan, leche, huevos, etc. en la tienda de la esquina.", "Después volvimos."],
        ["La empresa ganó 2.5 millones en 2023.", "El año anterior había perdido 300."],
        ["Vive en la Av. de la Constitución, núm. 5.", "Es un piso pequeño."],
    ],
    "en": [
        ["Mr. Smith met Dr. Jones at 10.30 a.m. on Monday.", "They talked for an hour."],
        ["The rod is 3.5 m long and costs $12.99 in the U.S. shop.", "Nobody bought one."],
        ["She asked, “Are you coming?”", "Then she left the room."],
        ["“Are you coming?” she asked.", "He did not answer."],
        ["J. R. R. Tolkien wrote The Hobbit.", "It appeared in 1937."],
        ["Visit https://www.example.com/docs/v2.1/index.html?id=7 for details.",
         "Or write to jane.doe@example.org today."],
        ["I waited... and waited.", "Nobody came."],
        ["Bring fruit, e.g. apples or pears, to the picnic.", "We start at noon."],
        ["The answer is 42.", "Everyone agreed."],
        ["We bought apples, pears, etc. at the market.", "Then we went home."],
        ["Wait!", "Is that you?", "Yes, it is."],
        ["The meeting is at 5 p.m.", "Please be on time."],
        ["He lives at No. 5 Baker Street.", "It is a famous address."],
        ["Our address is https://example.com.", "Everything is there."],
    ],
    "de": [
        ["Am 3. Mai fahren wir nach Berlin.", "Die Fahrt dauert vier Stunden."],
        ["Wir brauchen Obst, z. B. Äpfel und Birnen.", "Der Markt ist heute geöffnet."],
        ["Herr Dr. Müller kommt um 10.30 Uhr.", "Bitte warten Sie im Flur."],
        ["Das Treffen findet am 24. Dezember statt.", "Alle sind eingeladen."],
        ["Sie fragte: „Kommst du mit?“", "Er nickte nur."],
        ["Die Seite https://www.beispiel.de/hilfe/index.html?seite=2 erklärt alles.",
         "Fragen gehen an info.team@beispiel.de."],
        ["Ich wartete... und wartete.", "Niemand kam."],
        ["Das Ergebnis war 42.", "Damit hatte niemand gerechnet."],
        ["Er kaufte Brot, Milch usw. im Laden.", "Dann ging er heim."],
        ["Friedrich II. regierte lange.", "Sein Nachfolger war jünger."],
        ["Was ist los?", "Keine Ahnung!", "Frag morgen nochmal."],
        ["Das steht auf S. 12 im 2. Kapitel.", "Lies es bitte."],
        ["Die Version 3.5 erschien am 1. Juni 2024.", "Sie läuft stabil."],
    ],
    "fr": [
        ["M. Dupont est arrivé à 10 h 30.", "La réunion a commencé en retard."],
        ["Mme Martin a acheté des fruits, p. ex. des pommes et des poires.", "Elle les a mangés le soir."],
        ["La version 3.5 est sortie hier.", "Elle fonctionne bien."],
        ["Elle a demandé : « Tu viens ? »", "Il n'a pas répondu."],
        ["J. R. R. Tolkien a écrit Le Hobbit.", "Le livre date de 1937."],
        ["Consultez https://www.exemple.fr/aide/index.html?page=2 pour en savoir plus.",
         "Vous pouvez aussi écrire à jean.dupont@exemple.fr."],
        ["J'ai attendu... et attendu.", "Personne n'est venu."],
        ["Nous avons acheté du pain, du lait, etc. au marché.", "Puis nous sommes rentrés."],
        ["Le résultat est 42.", "Tout le monde était d'accord."],
        ["Quoi ?", "Tu pars déjà !", "Reste encore un peu."],
        ["Le chapitre commence p. 23 et finit p. 41.", "Lisez-le avant lundi."],
        ["Le Dr Leroy arrive à 10.30 demain.", "Attendez-le ici."],
    ],
    "it": [
        ["Il Sig. Rossi è arrivato alle 10.30 di mattina.", "La riunione è iniziata tardi."],
        ["La Dott.ssa Bianchi ha parlato per un'ora.", "Tutti hanno applaudito."],
        ["Abbiamo comprato frutta, ad es. mele e pere.", "Poi siamo tornati a casa."],
        ["Mi ha chiesto: «Vieni anche tu?»", "Non ho risposto."],
        ["J. R. R. Tolkien ha scritto Il Signore degli Anelli.", "È stato pubblicato nel 1954."],
        ["Visitate https://www.esempio.it/aiuto/index.html?pagina=2 per i dettagli.",
         "Oppure scrivete a mario.rossi@esempio.it."],
        ["Ho aspettato... e aspettato.", "Nessuno è venuto."],
        ["La versione 3.5 è uscita ieri.", "Funziona bene."],
        ["Abbiamo comprato pane, latte, ecc. al mercato.", "Poi siamo usciti."],
        ["Il risultato è 42.", "Nessuno se lo aspettava."],
        ["Davvero?", "Sì!", "Arrivo subito."],
    ],
    "pt": [
        ["O Sr. Silva chegou às 10.30 da manhã.", "A reunião começou atrasada."],
        ["A Dra. Costa apresentou a versão 3.5 do programa.", "Ninguém fez perguntas."],
        ["Trouxemos frutas, p. ex. maçãs e peras, para a viagem.", "Ninguém tinha fome."],
        ["Ela perguntou: “Você vem?”", "Ele não respondeu."],
        ["J. R. R. Tolkien escreveu O Hobbit.", "O livro saiu em 1937."],
        ["Acesse https://www.exemplo.com.br/ajuda/index.html?pagina=2 para mais detalhes.",
         "Ou escreva para joao.silva@exemplo.com.br."],
        ["Esperei... e esperei.", "Ninguém veio."],
        ["Compramos pão, leite, etc. no mercado.", "Depois voltamos para casa."],
        ["O resultado foi 42.", "Ninguém esperava isso."],
        ["Sério?", "Sim!", "Já vou."],
        ["Ele mora na Av. Paulista, n. 5.", "É um apartamento pequeno."],
    ],
    "ja": [
        ["今日は晴れです。", "明日は雨が降るでしょう。"],
        ["本当ですか？", "はい、本当です！"],
        ["彼は「行きますか？」と聞いた。", "私は答えなかった。"],
        ["詳しくは https://www.example.jp/help/index.html?page=2 をご覧ください。", "質問は info.team@example.jp までどうぞ。"],
        ["バージョン3.5が公開されました。", "とても安定しています。"],
        ["価格は12.5ドルです。", "安いですね。"],
        ["えっと…わかりません。", "また明日。"],
        ["山田さんは東京に住んでいます。", "毎日電車で通勤します。", "仕事は忙しいです。"],
        ["答えは42。", "みんな驚いた。"],
        ["J. R. R. トールキンは『ホビットの冒険』を書いた。", "とても有名な本です。"],
    ],
    "zh": [
        ["今天天气很好。", "我们去公园吧！"],
        ["你明天来吗？", "我一定来。"],
        ["他问：“你去吗？”", "我没有回答。"],
        ["请访问 https://www.example.cn/help/index.html?page=2 了解详情。", "也可以发邮件到 info.team@example.cn 联系我们。"],
        ["版本3.5已经发布了。", "大家都很高兴。"],
        ["价格是12.5元。", "很便宜。"],
        ["我等了又等……", "没有人来。"],
        ["答案是42。", "大家都同意。"],
        ["王先生住在北京。", "他每天坐地铁上班。", "工作很忙。"],
        ["真的吗？", "太好了！"],
    ],
    "hi": [
        ["मैं कल दिल्ली जाऊँगा।", "वहाँ मेरे दोस्त रहते हैं।"],
        ["क्या तुम आओगे?", "हाँ, ज़रूर!"],
        ["डॉ. शर्मा सुबह 10.30 बजे आएँगे।", "कृपया प्रतीक्षा करें।"],
        ["अधिक जानकारी के लिए https://www.example.in/help/index.html?page=2 देखें।",
         "या info.team@example.in पर लिखें।"],
        ["उसने पूछा, “क्या तुम चलोगे?”", "मैंने कुछ नहीं कहा।"],
        ["संस्करण 3.5 कल जारी हुआ।", "यह अच्छा चलता है।"],
        ["मैंने इंतज़ार किया... और इंतज़ार किया।", "कोई नहीं आया।"],
        ["राम घर गया।", "सीता बाज़ार गई।", "बच्चे खेल रहे थे।"],
        ["कुल कीमत 42.5 रुपये है।", "यह सस्ता है।"],
    ],
    "ar": [
        ["ذهبت إلى السوق صباحا.", "اشتريت خبزا وحليبا."],
        ["هل ستأتي غدا؟", "نعم، بالتأكيد!"],
        ["قال لي: «هل أنت متأكد؟»", "لم أجب."],
        ["للمزيد من المعلومات زوروا https://www.example.com/help/index.html?page=2 الآن.",
         "أو راسلونا على info.team@example.com اليوم."],
        ["صدر الإصدار 3.5 أمس.", "يعمل بشكل جيد."],
        ["د. أحمد يصل في الساعة 10.30 صباحا.", "انتظروه من فضلكم."],
        ["انتظرت... وانتظرت.", "لم يأت أحد."],
        ["النتيجة هي 42.", "لم يتوقع أحد ذلك."],
        ["ما هذا؟", "لا أعرف.", "اسأل أخاك."],
    ],
    "ru": [
        ["Г-н Иванов пришёл в 10.30 утра.", "Собрание началось поздно."],
        ["Мы купили фрукты, напр. яблоки и груши.", "Потом пошли домой."],
        ["Он спросил: «Ты придёшь?»", "Я промолчал."],
        ["Подробности на https://www.example.ru/help/index.html?page=2 и в справке.",
         "Пишите на ivan.petrov@example.ru."],
        ["А. С. Пушкин родился в Москве.", "Он написал много стихов."],
        ["Версия 3.5 вышла вчера.", "Она работает хорошо."],
        ["Я ждал... и ждал.", "Никто не пришёл."],
        ["Ответ был 42.", "Никто этого не ожидал."],
        ["Мы купили хлеб, молоко и т. д. в магазине.", "Потом вернулись."],
        ["Правда?", "Да!", "Иду."],
        ["Это было в 1799 г. в Москве.", "Город был большим."],
    ],
}


class Sentencex:
    """sentencex, called for character offsets: `get_sentence_boundaries(language, text)`."""

    name = "sentencex"

    def __init__(self):
        import sentencex

        self._boundaries = sentencex.get_sentence_boundaries
        self.version = importlib.metadata.version("sentencex")

    def language(self, language):
        """The code segmented with and whether the package says it supports `language` (None: it does not say)."""
        return language, None

    def spans(self, language, text):
        """The pieces of `text` as `(start, end, piece)` tuples."""
        return [(b["start_index"], b["end_index"], b["text"]) for b in self._boundaries(language, text)]

    def supported(self):
        """What the package says of its languages."""
        return dict(listed=None, note="exposes no list of languages; segments any code, falling back by itself")


class Pysbd:
    """pysbd, called for character offsets: `Segmenter(language, clean=False, char_span=True).segment(text)`.

    A language it rejects (`ValueError`) is segmented with `PYSBD_FALLBACK`'s rules.
    """

    name = "pysbd"

    def __init__(self):
        import pysbd

        self._pysbd = pysbd
        self._segmenters = {}
        self.version = importlib.metadata.version("pysbd")

    def language(self, language):
        """The code segmented with and whether pysbd supports `language`."""
        if language in self._pysbd.languages.LANGUAGE_CODES:
            return language, True
        return PYSBD_FALLBACK, False

    def spans(self, language, text):
        """The pieces of `text` as `(start, end, piece)` tuples."""
        code = self.language(language)[0]
        if code not in self._segmenters:
            self._segmenters[code] = self._pysbd.Segmenter(language=code, clean=False, char_span=True)
        return [(span.start, span.end, span.sent) for span in self._segmenters[code].segment(text)]

    def supported(self):
        """The languages pysbd lists (`pysbd.languages.LANGUAGE_CODES`)."""
        return dict(listed=sorted(self._pysbd.languages.LANGUAGE_CODES), note="raises ValueError for any other code")


SEGMENTERS = (Sentencex, Pysbd)


def ends_sentence(verse):
    """Whether `verse` ends in sentence-final punctuation, possibly followed by closing quotes or brackets.

    Example:

    >>> ends_sentence("He said, “Go.”"), ends_sentence("Y dijo:"), ends_sentence("(¿Quién?)")
    (True, False, True)
    """
    return verse.rstrip().rstrip(CLOSING)[-1:] in tuple(FINAL)


def paragraphs(verses, size):
    """Runs of `size` verses joined with a space, in order: `(text, gold, other_joins, verses)` tuples.

    `gold` holds the offsets where a verse starts after one that ends a
    sentence, `other_joins` those after the other verses.

    Example:

    >>> paragraphs(["Uno.", "Dos:", "Tres."], 3)
    [('Uno. Dos: Tres.', (5,), (10,), 3)]
    """
    out = []
    for first in range(0, len(verses), size):
        group = [verse.strip() for verse in verses[first:first + size]]
        gold, other, offset = [], [], 0
        for verse in group[:-1]:
            offset += len(verse) + 1
            (gold if ends_sentence(verse) else other).append(offset)
        out.append((" ".join(group), tuple(gold), tuple(other), len(group)))
    return out


def boundaries(spans, text):
    """The offsets where the pieces start, each moved past the whitespace that opens it; 0 and `len(text)` left out.

    Example:

    >>> sorted(boundaries([(0, 4, "Uno "), (4, 8, "Dos.")], "Uno Dos."))
    [4]
    >>> sorted(boundaries([(0, 3, "Uno"), (3, 8, " Dos.")], "Uno Dos."))
    [4]
    """
    found = set()
    for start, _, _ in spans:
        while start < len(text) and text[start].isspace():
            start += 1
        if 0 < start < len(text):
            found.add(start)
    return found


def lossless(spans, text):
    """Whether the pieces joined give back `text` and each piece's offsets point at it.

    Example:

    >>> lossless([(0, 4, "Uno "), (4, 8, "Dos.")], "Uno Dos."), lossless([(0, 3, "Uno"), (4, 8, "Dos.")], "Uno Dos.")
    (True, False)
    """
    return "".join(piece for _, _, piece in spans) == text and all(text[s:e] == piece for s, e, piece in spans)


#: Opening and closing marks; a boundary after more openings than closings of a pair lies inside a quotation.
PAIRS = (("“", "”"), ("«", "»"), ("(", ")"))


def inside_quotation(text, offset):
    """Whether `offset` lies after more openings than closings of a quotation mark or bracket of `PAIRS`.

    Example:

    >>> inside_quotation("He said, “Go. Now.”", 14), inside_quotation("He said, “Go.” Now.", 15)
    (True, False)
    """
    before = text[:offset]
    return any(before.count(opening) > before.count(closing) for opening, closing in PAIRS)


def score_verses(segmenter, language, split, size, texts, examples=10):
    """One row: recall of the gold verse joins, boundaries inside verses and at other joins, lossless paragraphs.

    The row also counts the missed gold joins that lie inside a quotation
    (`inside_quotation`: a quotation in the English reference often runs
    over several verses) and gives up to `examples` of the missed joins.
    """
    gold_total = found = other_total = other_split = inside = whole = verses = 0
    missed, missed_in_quotation = [], 0
    for text, gold, other, count in paragraphs(texts, size):
        spans = segmenter.spans(language, text)
        got = boundaries(spans, text)
        gold_total += len(gold)
        found += len(got & set(gold))
        for offset in sorted(set(gold) - got):
            missed_in_quotation += inside_quotation(text, offset)
            missed.append(_snippet(text, offset))
        other_total += len(other)
        other_split += len(got & set(other))
        inside += len(got - set(gold) - set(other))
        whole += lossless(spans, text)
        verses += count
    count = -(-len(texts) // size)
    return dict(kind="verses", segmenter=segmenter.name, language=language, split=split, verses_per_paragraph=size,
                paragraphs=count, verses=verses, gold_boundaries=gold_total, gold_found=found,
                recall=round(found / gold_total, 4) if gold_total else None,
                missed_inside_quotation=missed_in_quotation, missed_examples=missed[:examples],
                other_joins=other_total, other_joins_split=other_split, inside_verses=inside,
                inside_per_100_verses=round(100 * inside / verses, 1) if verses else None,
                lossless_paragraphs=whole, lossless_share=round(whole / count, 4) if count else None)


def _snippet(text, offset, width=30):
    return text[max(0, offset - width):offset] + "|" + text[offset:offset + width // 2]


def _prf(correct, predicted, gold):
    precision = correct / predicted if predicted else 1.0
    recall = correct / gold if gold else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return round(precision, 4), round(recall, 4), round(f1, 4)


def score_gold(segmenter, gold=None):
    """Rows of boundary precision, recall and F1 on the hand-made set: one a language, then `language="all"` (pooled).

    Each row lists the spurious and missed boundaries (`errors`, the text
    around each with `|` at the offset).
    """
    gold = GOLD if gold is None else gold
    rows = []
    for language, passages in gold.items():
        code, supported = segmenter.language(language)
        correct = predicted = expected = whole = 0
        errors = []
        for sentences in passages:
            joiner = JOINERS.get(language, " ")
            text = joiner.join(sentences)
            want, offset = set(), 0
            for sentence in sentences[:-1]:
                offset += len(sentence) + len(joiner)
                want.add(offset)
            spans = segmenter.spans(language, text)
            got = boundaries(spans, text)
            correct += len(got & want)
            predicted += len(got)
            expected += len(want)
            whole += lossless(spans, text)
            errors += [dict(kind="spurious", at=_snippet(text, b)) for b in sorted(got - want)]
            errors += [dict(kind="missed", at=_snippet(text, b)) for b in sorted(want - got)]
        precision, recall, f1 = _prf(correct, predicted, expected)
        rows.append(dict(kind="gold", segmenter=segmenter.name, language=language, language_used=code,
                         supported=supported, passages=len(passages), gold_boundaries=expected,
                         predicted_boundaries=predicted, correct=correct, precision=precision, recall=recall,
                         f1=f1, lossless_passages=whole, errors=errors))
    totals = {key: sum(row[key] for row in rows) for key in
              ("passages", "gold_boundaries", "predicted_boundaries", "correct", "lossless_passages")}
    precision, recall, f1 = _prf(totals["correct"], totals["predicted_boundaries"], totals["gold_boundaries"])
    rows.append(dict(kind="gold", segmenter=segmenter.name, language="all", language_used=None, supported=None,
                     **totals, precision=precision, recall=recall, f1=f1, errors=None))
    return rows


def speed(segmenters, texts, repeats=5, language="es"):
    """Rows of characters a second: a warm-up pass, then `repeats` passes over `texts`, the segmenters in turn, median."""
    seconds = {segmenter.name: [] for segmenter in segmenters}
    for segmenter in segmenters:
        for text in texts:
            segmenter.spans(language, text)
    for _ in range(repeats):
        for segmenter in segmenters:
            start = time.perf_counter()
            for text in texts:
                segmenter.spans(language, text)
            seconds[segmenter.name].append(time.perf_counter() - start)
    characters = sum(len(text) for text in texts)
    return [dict(kind="speed", segmenter=segmenter.name, language=language, paragraphs=len(texts),
                 characters=characters, repeats=repeats, seconds=[round(s, 5) for s in seconds[segmenter.name]],
                 chars_per_second=round(characters / statistics.median(seconds[segmenter.name])))
            for segmenter in segmenters]


def import_seconds(module, repeats=3):
    """The seconds `import module` takes in a fresh interpreter, each of `repeats` runs."""
    code = f"import time; t=time.perf_counter(); import {module}; print(time.perf_counter()-t)"
    return [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout.strip()) for _ in range(repeats)]


def machine(segmenters, run):
    """The row that names the machine, the packages and the date."""
    return dict(kind="machine", run=run, date=run, cpu=cpu_model(), avx512f="avx512f" in cpu_flags(),
                cores=os.cpu_count(), python=platform.python_version(),
                versions={segmenter.name: segmenter.version for segmenter in segmenters},
                supported={segmenter.name: segmenter.supported() for segmenter in segmenters})


def measure(limit=None, repeats=5, import_repeats=3, log=print):
    """Every row of one run: the machine, the verses, the gold set, speed and import time."""
    run = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    segmenters = [make() for make in SEGMENTERS]
    rows = [machine(segmenters, run)]
    rows[0]["limit"] = limit
    verses = {split: load_bible_pairs(split)[:limit] for split in SPLITS}
    for split in SPLITS:
        for language, texts in (("es", [p.source for p in verses[split]]),
                                ("en", [p.references[0] for p in verses[split]])):
            for size in VERSES_PER_PARAGRAPH:
                for segmenter in segmenters:
                    rows.append(score_verses(segmenter, language, split, size, texts))
                    log(json.dumps(rows[-1]))
    for segmenter in segmenters:
        rows += score_gold(segmenter)
        log(json.dumps({k: v for k, v in rows[-1].items() if k != "errors"}))
    texts = [text for text, *_ in paragraphs([p.source for p in verses["test"]], 6)]
    rows += speed(segmenters, texts, repeats=repeats)
    for segmenter in segmenters:
        seconds = import_seconds(segmenter.name, import_repeats)
        rows.append(dict(kind="import", segmenter=segmenter.name, seconds=[round(s, 4) for s in seconds],
                         median_seconds=round(statistics.median(seconds), 4)))
    for row in rows[-4:]:
        log(json.dumps(row))
    for row in rows:
        row["run"] = run
    return rows


def _percent(value):
    return "" if value is None else f"{value:.1%}"


def _section(rows):
    head = next(r for r in rows if r["kind"] == "machine")
    names = list(head["versions"])
    versions = ", ".join(f"{name} {version}" for name, version in head["versions"].items())
    limit = f"; first {head['limit']} verses of each split" if head.get("limit") else ""
    lines = [f"## {head['date']}: {head['cpu']}, {head['cores']} cores, "
             f"{'AVX-512' if head['avx512f'] else 'no AVX-512'}; Python {head['python']}, {versions}{limit}", "",
             "### The corpus' verses", "",
             "Gold: the joins after a verse that ends a sentence. Missed inside a quotation: missed gold joins "
             "after an unclosed “, « or ( (a quotation may run over several verses). Inside verses: boundaries "
             "not at a join (a verse may hold several sentences). Other joins: splits after a verse ending in "
             "`:`, `;`, `,`.", "",
             "| segmenter | text | split | verses a paragraph | paragraphs | gold boundaries | recall "
             "| missed inside a quotation | inside verses, per 100 verses | other joins split | lossless paragraphs |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["kind"] == "verses":
            lines.append(f"| {r['segmenter']} | {r['language']} | {r['split']} | {r['verses_per_paragraph']} | "
                         f"{r['paragraphs']} | {r['gold_boundaries']} | {_percent(r['recall'])} | "
                         f"{r['missed_inside_quotation']} of {r['gold_boundaries'] - r['gold_found']} | "
                         f"{r['inside_per_100_verses']} | {r['other_joins_split']} of {r['other_joins']} | "
                         f"{_percent(r['lossless_share'])} |")
    gold = {(r["segmenter"], r["language"]): r for r in rows if r["kind"] == "gold"}
    languages = list(dict.fromkeys(language for _, language in gold))
    lines += ["", "### Hand-made gold set: boundary precision, recall, F1", "",
              "| language | passages | gold boundaries | " + " | ".join(
                  f"{n} P | {n} R | {n} F1 | {n} lossless" for n in names) + " |",
              "|---|---:|---:|" + "---:|---:|---:|---:|" * len(names)]
    for language in languages:
        first = gold[(names[0], language)]
        cells = []
        for name in names:
            r = gold[(name, language)]
            used = f" ({r['language_used']} rules)" if r["supported"] is False else ""
            cells.append(f"{r['precision']:.3f}{used} | {r['recall']:.3f} | {r['f1']:.3f} | "
                         f"{r['lossless_passages']}/{r['passages']}")
        label = "all (pooled)" if language == "all" else language
        lines.append(f"| {label} | {first['passages']} | {first['gold_boundaries']} | " + " | ".join(cells) + " |")
    lines.append("")
    for name in names:
        said = head["supported"][name]
        listed = f"lists {len(said['listed'])} languages ({', '.join(said['listed'])}); " if said["listed"] else ""
        fallback = sorted({r["language"] for r in gold.values() if r["segmenter"] == name and r["supported"] is False})
        fell = f"; {', '.join(fallback)} segmented with {PYSBD_FALLBACK} rules" if fallback else ""
        lines.append(f"- {name}: {listed}{said['note']}{fell}.")
    lines += ["", "### Speed and import", "",
              "| segmenter | version | characters (test, es, paragraphs of 6) | characters a second (median) "
              "| import seconds (median) |", "|---|---|---:|---:|---:|"]
    imports = {r["segmenter"]: r for r in rows if r["kind"] == "import"}
    for r in rows:
        if r["kind"] == "speed":
            lines.append(f"| {r['segmenter']} | {head['versions'][r['segmenter']]} | {r['characters']} | "
                         f"{r['chars_per_second']:,} | {imports[r['segmenter']]['median_seconds']:.3f} |")
    return lines


def markdown(rows):
    """The rows as Markdown: a section a run (its machine and packages), each with the verse, gold-set and speed tables."""
    runs = list(dict.fromkeys(r["run"] for r in rows))
    lines = ["# Sentence segmenters: sentencex and pysbd", "",
             "`python -m benchmarks.sentence_splitters --out DIR` (see the module's docstring)."]
    for run in runs:
        lines += [""] + _section([r for r in rows if r["run"] == run])
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Measures, then adds the rows to `results.json` and `results.md` in `--out` (several runs share a folder)."""
    from benchmarks.results_folder import add_rows

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--limit", type=int, default=None, help="the first N verses of each split (a smoke test)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes for speed (default: %(default)s)")
    args = parser.parse_args(argv)
    add_rows(args.out, measure(limit=args.limit, repeats=args.repeats), markdown)


if __name__ == "__main__":
    main()
