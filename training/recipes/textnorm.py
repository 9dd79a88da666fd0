"""Text normalisation for TTS corpora.

Two stages, because the engine and the transcript need different strings: `spell_out`
turns numbers and symbols into words but keeps case and sentence punctuation (better
prosody from the engines), and `transcript` reduces that to lowercase a-z, apostrophe
and space, which is exactly what the engines were asked to say.
"""

from __future__ import annotations

import re

ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
# the words a cardinal is spelled with (``cardinal``)
NUMBER_WORDS = frozenset([*ONES, *TENS[2:], "hundred", *(name for _, name in SCALES)])
ORDINAL_IRREGULAR = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
}
SYMBOLS = {"&": " and ", "%": " percent ", "+": " plus ", "=": " equals ", "@": " at "}


def cardinal(n: int) -> str:
    """Spell a non-negative integer in US English words ("one hundred twenty three")."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 20:
        return ONES[n]
    if n < 100:
        tens, rest = divmod(n, 10)
        return TENS[tens] + ("" if rest == 0 else " " + ONES[rest])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return ONES[hundreds] + " hundred" + ("" if rest == 0 else " " + cardinal(rest))
    for scale, name in SCALES:
        if n >= scale:
            high, rest = divmod(n, scale)
            return cardinal(high) + " " + name + ("" if rest == 0 else " " + cardinal(rest))
    raise AssertionError("unreachable")


def ordinal(n: int) -> str:
    """Spell an ordinal ("twenty first") by rewriting the last word of the cardinal."""
    words = cardinal(n).split()
    last = words[-1]
    if last in ORDINAL_IRREGULAR:
        words[-1] = ORDINAL_IRREGULAR[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def year(n: int) -> str:
    """Spell a year the way it is read aloud: 1984 -> nineteen eighty four, 2005 -> two thousand five."""
    high, low = divmod(n, 100)
    if 2000 <= n < 2010 or high % 10 == 0:
        return cardinal(n)
    if low == 0:
        return cardinal(high) + " hundred"
    return cardinal(high) + " " + ("oh " + ONES[low] if low < 10 else cardinal(low))


def digits(text: str) -> str:
    """Spell digits one by one, as decimals after the point are read."""
    return " ".join(ONES[int(d)] for d in text)


def decimal(text: str) -> str:
    """Spell "3.14" as "three point one four" (integer part as a cardinal)."""
    whole, _, frac = text.partition(".")
    head = cardinal(int(whole)) if whole else "zero"
    return head + (" point " + digits(frac) if frac else "")


def plural_year(n: int) -> str:
    """Spell decades like 1960s -> nineteen sixties, 80s -> eighties."""
    words = (year(n) if n >= 100 else cardinal(n)).split()
    last = words[-1]
    words[-1] = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return " ".join(words)


def money(symbol: str, amount: str, scale: str) -> str:
    """Spell "$5.50" as "five dollars and fifty cents", "$3 million" as "three million dollars"."""
    one, many, sub_one, sub_many = CURRENCIES[symbol]
    whole, _, frac = amount.replace(",", "").partition(".")
    value = int(whole or "0")
    if scale:
        number = decimal(whole + ("." + frac if frac else "")) if frac else cardinal(value)
        return f"{number} {scale} {many}"
    words = f"{cardinal(value)} {one if value == 1 else many}" if value or not frac else ""
    cents = int((frac + "00")[:2]) if frac else 0
    if cents:
        cent_words = f"{cardinal(cents)} {sub_one if cents == 1 else sub_many}"
        words = f"{words} and {cent_words}" if words else cent_words
    return words


NUMBER = r"\d{1,3}(?:,\d{3})+|\d+"
MONEY_RE = re.compile(
    r"([$£])\s?((?:" + NUMBER + r")(?:\.\d+)?)(?:\s(thousand|million|billion|trillion)\b)?"
)
PERCENT_RE = re.compile(r"(\d+(?:\.\d+)?)\s?%")
ORDINAL_RE = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.IGNORECASE)
DECADE_RE = re.compile(r"(?:\b|')(\d{2}|1\d{3}|20\d{2})'?s\b")
TIME_RE = re.compile(r"\b(\d{1,2}):(\d{2})\b")
DECIMAL_RE = re.compile(r"(?<![\d.])(\d*\.\d+)\b")
YEAR_RE = re.compile(r"\b(1[1-9]\d{2}|20\d{2})\b")
CARDINAL_RE = re.compile(r"(?<![\w.])-?(" + NUMBER + r")\b")


def clock(hours: str, minutes: str) -> str:
    """Spell "10:30" as "ten thirty" and "9:05" as "nine oh five"."""
    m = int(minutes)
    tail = "o'clock" if m == 0 else ("oh " + ONES[m] if m < 10 else cardinal(m))
    return f"{cardinal(int(hours))} {tail}"


def signed_cardinal(match: re.Match[str]) -> str:
    """Spell a plain number, with a leading minus sign read as "minus"."""
    words = cardinal(int(match.group(1).replace(",", "")))
    return ("minus " + words) if match.group(0).startswith("-") else words


def spell_out(text: str) -> str:
    """Replace numbers and symbols with words; keep case and punctuation for the engines."""
    text = MONEY_RE.sub(lambda m: " " + money(m.group(1), m.group(2), m.group(3) or "") + " ", text)
    text = PERCENT_RE.sub(
        lambda m: (
            " "
            + (decimal(m.group(1)) if "." in m.group(1) else cardinal(int(m.group(1))))
            + " percent "
        ),
        text,
    )
    text = ORDINAL_RE.sub(lambda m: ordinal(int(m.group(1))), text)
    text = DECADE_RE.sub(lambda m: plural_year(int(m.group(1))), text)
    text = TIME_RE.sub(lambda m: clock(m.group(1), m.group(2)), text)
    text = DECIMAL_RE.sub(lambda m: decimal(m.group(1)), text)
    text = YEAR_RE.sub(lambda m: year(int(m.group(1))), text)
    text = CARDINAL_RE.sub(signed_cardinal, text)
    for symbol, words in SYMBOLS.items():
        text = text.replace(symbol, words)
    text = re.sub(r"(?<=\w)-(?=\w)", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def transcript(spoken: str) -> str:
    """Reduce engine text to the training alphabet: lowercase a-z, apostrophe, space."""
    text = spoken.lower().replace("’", "'")
    text = re.sub(r"[^a-z' ]+", " ", text)
    text = re.sub(r"(?<![a-z])'|'(?![a-z])", " ", text)
    return " ".join(text.split())


def normalize(text: str) -> str:
    """Spell out and reduce in one step: the transcript of `text`."""
    return transcript(spell_out(text))


def letter_runs(words: list[str]) -> list[tuple[int, int]]:
    """The (start, end) spans of ``words`` that spell letters: runs of two or more
    one-letter words, not all of them "a" or "i" (which stand alone as words)."""
    spans = []
    start = 0
    for end, word in enumerate([*words, ""]):
        if len(word) == 1:
            continue
        run = words[start:end]
        if len(run) > 1 and any(w not in "ai" for w in run):
            spans.append((start, end))
        start = end + 1
    return spans


def join_letters(words: list[str]) -> list[str]:
    """``words`` with each spelled-letter run joined into one ("m f a" = "mfa", as Whisper
    writes it)."""
    out = list(words)
    for start, end in reversed(letter_runs(words)):
        out[start:end] = ["".join(words[start:end])]
    return out


BLOCKLIST = frozenset(
    """
    fuck fucking fucked shit shitty bitch bastard cunt dick cock pussy whore slut tits
    asshole ass rape raped nigger fag faggot retard penis vagina sex sexy sexual orgasm
    porn masturbate nazi kill killed suicide drunk drugs
    """.split()
)
ABBREVIATIONS = frozenset("mr mrs ms dr st jr sr vs etc ie eg inc ltd co no vol pp".split())
ALLOWED = re.compile(r"^[A-Za-z0-9 ,.;:!?'\"$£%&+()\-]+$")


def is_clean(sentence: str, min_words: int = 3, max_words: int = 20) -> bool:
    """Keep only sentences a TTS engine reads exactly as we transcribe them.

    Rejects odd characters, acronyms and abbreviations (engines expand or spell them
    unpredictably), words mixing letters and digits, speaker tags like "Q:", crude
    words, and anything outside 3-20 words once spelled out.
    """
    if not ALLOWED.match(sentence) or re.search(r"\b[A-Z]\s?:", sentence):
        return False
    if re.search(r"\b[A-Z]{2,}\b|\b[A-Za-z]+\d|\d+[A-Za-z]{3,}|\.\.|\(\)", sentence):
        return False
    if re.search(r"\b(?:" + "|".join(ABBREVIATIONS) + r")\.", sentence, re.IGNORECASE):
        return False
    words = normalize(sentence).split()
    if not min_words <= len(words) <= max_words:
        return False
    if any(w in BLOCKLIST for w in words):
        return False
    return not any(w.strip("'") in ABBREVIATIONS or (len(w) == 1 and w not in "ai") for w in words)
