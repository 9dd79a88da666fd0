"""Generated everyday material: what people say to a live transcriber besides prose.

Numbers of every kind read out (cardinals, ordinals, years, times, dates, money, phone
numbers and codes digit by digit, decimals, percentages), spelled letters and the NATO
alphabet, short commands and replies, and one- or two-word utterances. `pairs(seed)` is a
pure function of the seed and `count`: the same (engine text, transcript) list every time.

Transcripts are in the corpus alphabet (lowercase a-z, apostrophe, space), as
`textnorm.normalize` makes them: numbers as words the way they are read ("nineteen ninety
nine", "seven oh five", "three pounds and fifty pence"), a phone number digit by digit
("five five five zero one nine ..."; when the engine is asked to say "oh" for a zero, the
transcript says "oh" too). A spelled letter is written as the lowercase letter on its own,
one word per letter: "b", "c a t"; a NATO code word as the word: "bravo", "x ray".

Engine text spells the same words, capitalised and punctuated for prosody. A spelled letter
is its capital, separated from its neighbours by commas ("C, Eigh, T"): espeak-ng (so piper
and Kokoro, which phonemise with it), flite and festival all read a lone capital as the
letter's name, except festival, which reads a final "A" as the article; "Eigh" is read as
the letter A by all of them, so A is spoken as "Eigh" everywhere (LETTER_SPOKEN). An item
that ends in a spelled letter has no full stop: espeak-ng takes "B." for an abbreviation
and cuts the audio off inside the letter.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable

from training.recipes.textnorm import (
    BLOCKLIST,
    cardinal,
    clock,
    decimal,
    digits,
    money,
    ordinal,
    transcript,
    year,
)

# What each engine reads as the letter's name when it stands alone between commas or at
# the end of an utterance (checked on espeak-ng, piper, Kokoro, flite and festival).
LETTER_SPOKEN = {c: c.upper() for c in string.ascii_lowercase} | {"a": "Eigh"}
NATO = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey x-ray yankee zulu"
).split()
MONTHS = (
    "January February March April May June July August September October November December"
).split()
MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
NAMES = (
    "Anna John Sarah David Emma James Maria Peter Lucy Tom Kate Michael Laura Paul Alice "
    "Mark Grace Daniel Sophie Ben"
).split()
COMMANDS = """
Stop. Start. Next. Go back. Next slide. Previous slide. Go on. Pause. Play. Resume. Continue.
Cancel. Undo. Redo. Save. Save it. Send. Send it. Delete that. Scratch that. Try again.
Repeat that. Say that again. Louder. Quieter. Volume up. Volume down. Mute. Unmute.
Turn it off. Turn it on. Turn on the lights. Turn off the lights. Lights off. Lights on.
Open the door. Close the window. Call mom. Call dad. Call home. Call the office. Read it.
Read it back. Play music. Play the next song. Skip. Skip this one. Shuffle. Open settings.
Open the calendar. Show me. Show the map. Zoom in. Zoom out. Scroll down. Scroll up. Go home.
Take a picture. Set an alarm. Set a timer. What time is it? Where am I? Help me. New line.
New paragraph. Full stop. Comma. Question mark. Select all. Copy. Paste. Copy that. Print.
Log out. Sign in. Wake up. Go to sleep. Check my email. Any messages? Reply. Answer. Hang up.
End call. Speaker on. Find my phone. Navigate home. Start recording. Stop recording.
Start the timer. Lock the door. Unlock it. Refresh. Search. Search the web. Open a new tab.
Close the tab. Go forward. Go to the top. Page down. Page up. Make it bigger. Make it smaller.
Turn it up. Turn it down. Clear everything. Show me the weather. What's next? Remind me later.
"""
REPLIES = """
Yes. No. Yeah. Nope. Okay. Sure. Thanks. Thank you. No thanks. Yes please. Hello. Hi. Hey.
Goodbye. Bye. See you. See you later. Good morning. Good afternoon. Good evening. Good night.
Sorry. Excuse me. Pardon? What? Why? How? When? Where? Who? Really? Of course. Maybe.
Perhaps. I don't know. I agree. Not yet. Not now. Right. Exactly. Absolutely. Definitely.
Great. Perfect. Fine. Cool. Awesome. Wait. Hold on. Just a moment. One moment. Never mind.
All right. Got it. Me too. Well done. Congratulations. Cheers. Welcome. Please. Correct.
Wrong. True. False. Done. Ready. Almost. Listen. Look. Come here. Let's go. Hurry up.
Slow down. Be careful. Good luck. Happy birthday. Nice to meet you. How are you? I'm fine.
Not bad. Sounds good. Why not? No problem. You're welcome. That's right. I see. Go ahead.
"""
# Nouns with regular plurals (+s), adjectives, and time words for one- and two-word items.
NOUNS = """
coffee ticket table phone doctor kitchen window garden office meeting taxi bottle minute
second hour day week month year room car train bus plane flight seat key door book letter
email message picture song game friend brother sister teacher student lawyer apple banana
sandwich burger pizza cookie cake egg onion tomato potato chair desk computer printer laptop
camera pencil hotel ticket bag shirt shoe hat coat river mountain beach road street bridge
""".split()
MASS_NOUNS = "water milk tea bread rice music weather traffic money homework luggage".split()
ADJECTIVES = """
big small hot cold new old good bad fast slow early late next last quick quiet loud cheap
free red blue green yellow black white orange purple pink brown long short easy hard
""".split()
TIME_WORDS = (
    "today tomorrow yesterday tonight morning afternoon evening weekend now later soon".split()
)
UNITS = "minutes hours days weeks miles kilometers degrees percent people dollars pounds".split()


def phrases(block: str) -> list[str]:
    """The phrases of a block like COMMANDS, each with its own end punctuation."""
    return [p.strip() for p in re.findall(r"[^.?]+[.?]", " ".join(block.split()))]


COMMANDS_LIST, REPLIES_LIST = phrases(COMMANDS), phrases(REPLIES)


def sentence(words: str, end: str = ".") -> str:
    """Engine text: first letter capitalised, sentence punctuation at the end."""
    return words[:1].upper() + words[1:] + end


def spoken_text(spoken: str) -> tuple[str, str]:
    """(engine text, transcript) for engine text that holds only words."""
    return spoken, transcript(spoken)


def plural(noun: str) -> str:
    """Regular English plural (the noun lists hold only regular nouns)."""
    if noun.endswith(("s", "sh", "ch", "x")) or noun in ("potato", "tomato"):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def some_number(rng: random.Random) -> int:
    """A cardinal with a spread of sizes: small ones most often, a few in the millions."""
    high = rng.choice((10, 20, 100, 100, 1000, 10_000, 1_000_000, 100_000_000))
    return rng.randrange(0 if high <= 20 else 1, high)


def spoken_digits(number: str, oh: bool) -> str:
    """Digits one by one, zero read as "oh" when `oh`."""
    words = digits(number)
    return re.sub(r"\bzero\b", "oh", words) if oh else words


# Each generator draws one (engine text, transcript) item.


def gen_cardinal(rng: random.Random) -> tuple[str, str]:
    n = some_number(rng)
    contexts = ("number {}", "page {}", "room {}", "chapter {}", "step {}", "line {}")
    form = rng.choice(contexts) if n < 1000 and rng.random() < 0.4 else "{}"
    return spoken_text(sentence(form.format(cardinal(n))))


def gen_counted(rng: random.Random) -> tuple[str, str]:
    n = rng.choice((rng.randrange(2, 13), rng.randrange(13, 100), rng.randrange(100, 1000)))
    what = rng.choice((plural(rng.choice(NOUNS)), rng.choice(UNITS)))
    if rng.random() < 0.2:
        words = f"minus {cardinal(rng.randrange(2, 40))} degrees"
    else:
        words = f"{cardinal(n)} {what}"
    return spoken_text(sentence(words))


def gen_decimal(rng: random.Random) -> tuple[str, str]:
    value = f"{rng.randrange(0, 100)}.{rng.randrange(1, 100)}".rstrip("0")
    words = decimal(value) + rng.choice(("", "", " percent", " kilometers", " degrees"))
    return spoken_text(sentence(words))


def gen_fraction(rng: random.Random) -> tuple[str, str]:
    words = rng.choice(
        ("a half", "a quarter", "three quarters", "one third", "two thirds", "half an hour")
    )
    if rng.random() < 0.5:
        words = f"{cardinal(rng.randrange(1, 10))} and {words}"
    return spoken_text(sentence(words))


def gen_ordinal(rng: random.Random) -> tuple[str, str]:
    n = rng.choice((rng.randrange(1, 11), rng.randrange(1, 32), rng.randrange(1, 101)))
    form = rng.choice(("{}", "the {}", "{} floor", "{} place", "the {} time", "{} please"))
    return spoken_text(sentence(form.format(ordinal(n))))


def gen_year(rng: random.Random) -> tuple[str, str]:
    y = rng.choice(
        (rng.randrange(1900, 2031), rng.randrange(1900, 2031), rng.randrange(1100, 2100))
    )
    form = rng.choice(("{}", "{}", "in {}", "since {}", "back in {}", "the year {}"))
    return spoken_text(sentence(form.format(year(y))))


def gen_time(rng: random.Random) -> tuple[str, str]:
    h = rng.randrange(1, 13)
    kind = rng.random()
    if kind < 0.6:
        words = clock(str(h), f"{rng.choice((0, 15, 30, 45, rng.randrange(60))):02d}")
    elif kind < 0.9:
        past = rng.choice(("half past", "quarter past", "quarter to", "ten past", "twenty to"))
        words = f"{past} {cardinal(h)}"
    else:
        words = rng.choice(("noon", "midnight", "midday"))
    tail = rng.choice(("", "", "", " tomorrow", " tonight", " in the morning", " in the evening"))
    head = rng.choice(("", "", "", "at ", "it's ", "about "))
    return spoken_text(sentence(head + words + tail))


def gen_date(rng: random.Random) -> tuple[str, str]:
    month = rng.randrange(12)
    day = ordinal(rng.randrange(1, MONTH_DAYS[month] + 1))
    if rng.random() < 0.15:
        return spoken_text(sentence(rng.choice((f"on the {day}", f"{rng.choice(DAYS)} the {day}"))))
    words = rng.choice((f"{MONTHS[month]} {day}", f"the {day} of {MONTHS[month]}"))
    if rng.random() < 0.2:
        words = f"{rng.choice(DAYS)}, {words}"
    if rng.random() < 0.3:
        words += f", {year(rng.randrange(1950, 2031))}"
    return spoken_text(sentence(words))


def gen_money(rng: random.Random) -> tuple[str, str]:
    symbol = rng.choice(("$", "£"))
    whole = rng.choice((rng.randrange(0, 10), rng.randrange(1, 100), rng.randrange(1, 10_000)))
    cents = rng.choice((0, 0, rng.randrange(1, 100), 50, 99))
    if rng.random() < 0.05:
        return spoken_text(sentence(money(symbol, str(rng.randrange(1, 100)), "million")))
    amount = f"{whole}.{cents:02d}" if cents else str(whole)
    return spoken_text(sentence(money(symbol, amount, "")))


def gen_phone(rng: random.Random) -> tuple[str, str]:
    layout = rng.choice(((3, 3, 4), (3, 3, 4), (3, 4), (5, 6), (4, 3, 3)))
    groups = ["".join(str(rng.randrange(10)) for _ in range(n)) for n in layout]
    if layout == (5, 6):
        groups[0] = "0" + groups[0][1:]  # a UK number
    oh = rng.random() < 0.4
    return spoken_text(sentence(", ".join(spoken_digits(g, oh) for g in groups)))


def gen_code(rng: random.Random) -> tuple[str, str]:
    number = "".join(str(rng.randrange(10)) for _ in range(rng.randrange(2, 7)))
    head = rng.choice(("", "", "", "the code is ", "extension ", "flight ", "order number "))
    return spoken_text(sentence(head + spoken_digits(number, rng.random() < 0.3)))


def letters(chars: str) -> tuple[str, str]:
    """Spelled letters: capitals between commas for the engine, "c a t" for the transcript."""
    return sentence(", ".join(LETTER_SPOKEN[c] for c in chars), end=""), " ".join(chars)


def gen_letters(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    if kind < 0.3:
        return letters(rng.choice(string.ascii_lowercase))
    if kind < 0.6:
        word = rng.choice([w for w in NOUNS + ADJECTIVES if len(w) <= 6])
        return letters(word)
    return letters("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randrange(2, 5))))


def gen_seat(rng: random.Random) -> tuple[str, str]:
    """A number and a letter, as in seats, gates and flats: "seat twelve b"."""
    place = rng.choice(("seat", "gate", "flat", "row", "platform", "bay"))
    n, c = cardinal(rng.randrange(1, 40)), rng.choice(string.ascii_lowercase)
    return sentence(f"{place} {n}, {LETTER_SPOKEN[c]}", end=""), f"{place} {n} {c}"


def gen_nato(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    if kind < 0.3:
        word = rng.choice(NATO)
        spoken = f"{LETTER_SPOKEN[word[0]]} as in {word.replace('-', ' ')}"
        return sentence(spoken), f"{word[0]} as in {transcript(word)}"
    words = [rng.choice(NATO) for _ in range(1 if kind < 0.65 else rng.randrange(2, 5))]
    return spoken_text(sentence(", ".join(w.replace("-", " ") for w in words)))


def gen_command(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    if kind < 0.6:
        return spoken_text(rng.choice(COMMANDS_LIST))
    if kind < 0.8:
        verb = rng.choice(("Call", "Text", "Message", "Email", "Find"))
        return spoken_text(sentence(f"{verb} {rng.choice(NAMES)}"))
    n = cardinal(rng.randrange(2, 61))
    form = rng.choice(
        (
            "set a timer for {} minutes",
            "go to page {}",
            "turn to channel {}",
            "skip {} seconds",
            "volume {}",
            "table for {}",
            "wait {} minutes",
            "go to slide {}",
        )
    )
    return spoken_text(sentence(form.format(n)))


def gen_reply(rng: random.Random) -> tuple[str, str]:
    return spoken_text(rng.choice(REPLIES_LIST))


def gen_words(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    if kind < 0.3:
        words = rng.choice(NOUNS + MASS_NOUNS + TIME_WORDS + ADJECTIVES)
    elif kind < 0.45:
        words = rng.choice(DAYS + MONTHS + NAMES)
    elif kind < 0.75:
        words = f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    elif kind < 0.9:
        which = rng.choice(("this", "next", "last", "every"))
        words = f"{which} {rng.choice([*DAYS, 'week', 'month', 'year', 'morning', 'evening'])}"
    else:
        words = f"{rng.choice(DAYS)} {rng.choice(('morning', 'afternoon', 'evening', 'night'))}"
    return spoken_text(sentence(words))


# Share of draws per kind: short commands, replies, letters and numbers carry the material.
GENERATORS: dict[str, tuple[float, Callable[[random.Random], tuple[str, str]]]] = {
    "cardinal": (0.12, gen_cardinal),
    "counted": (0.05, gen_counted),
    "decimal": (0.03, gen_decimal),
    "fraction": (0.01, gen_fraction),
    "ordinal": (0.05, gen_ordinal),
    "year": (0.06, gen_year),
    "time": (0.07, gen_time),
    "date": (0.07, gen_date),
    "money": (0.07, gen_money),
    "phone": (0.05, gen_phone),
    "code": (0.04, gen_code),
    "letters": (0.09, gen_letters),
    "seat": (0.02, gen_seat),
    "nato": (0.06, gen_nato),
    "command": (0.09, gen_command),
    "reply": (0.05, gen_reply),
    "words": (0.07, gen_words),
}


def fixed_items() -> list[tuple[str, str]]:
    """Every letter, code word, command and reply, and the numbers up to a hundred: the
    closed sets, each present once whatever the seed."""
    items = [letters(c) for c in string.ascii_lowercase]
    items += [spoken_text(sentence(w.replace("-", " "))) for w in NATO]
    items += [spoken_text(p) for p in COMMANDS_LIST + REPLIES_LIST]
    items += [spoken_text(sentence(cardinal(n))) for n in range(101)]
    items += [spoken_text(sentence(ordinal(n))) for n in range(1, 32)]
    return items


SPOKEN_ALPHABET = re.compile(r"^[A-Za-z' ,.;:!?]+$")
TRANSCRIPT_ALPHABET = re.compile(r"^[a-z']+(?: [a-z']+)*$")


def is_clean_item(spoken: str, text: str, max_words: int = 20) -> bool:
    """The rule for generated material (`textnorm.is_clean` is for found prose, which must
    have 3-20 words and no lone letters): engine text only in the letters and punctuation
    every engine reads; a normalised transcript of 1 to `max_words` words, nothing crude."""
    words = text.split()
    return (
        bool(SPOKEN_ALPHABET.match(spoken))
        and bool(TRANSCRIPT_ALPHABET.match(text))
        and transcript(text) == text
        and 1 <= len(words) <= max_words
        and not any(w in BLOCKLIST for w in words)
    )


def pairs(seed: int, count: int = 20_000) -> list[tuple[str, str]]:
    """`count` distinct (engine text, transcript) items, fewer only if the draws run dry: the
    closed sets first, then random draws by GENERATORS' shares. A pure function of its
    arguments; distinct by transcript."""
    rng = random.Random(seed)
    kinds = list(GENERATORS)
    shares = [GENERATORS[k][0] for k in kinds]
    seen: set[str] = set()
    out: list[tuple[str, str]] = []

    def add(item: tuple[str, str]) -> None:
        if item[1] not in seen and is_clean_item(*item):
            seen.add(item[1])
            out.append(item)

    for item in fixed_items():
        add(item)
    for _ in range(20 * count):
        if len(out) >= count:
            break
        add(GENERATORS[rng.choices(kinds, shares)[0]][1](rng))
    return out[:count]
