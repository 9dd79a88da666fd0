"""The allowed list: the only packages whose recordings of real people training code fetches.

Every other package's human speech is held out for independent measurement (never fetched,
tuned on or committed); that includes ``asterisk-core-sounds-es*``, whose speaker also
recorded held-out material. Each package is pinned by its Debian version and the SHA-256
of its ``.deb``, so a source always yields the same clips. A source asked for by a name
not listed here is refused, never looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from training.real_audio import asterisk, codec2, drascula, games, queen, sky, tuxpaint
from training.real_audio.clip import Clip


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str  # of the .deb, recorded at its first download


@dataclass(frozen=True)
class Source:
    """``clips`` gets the extracted trees of ``packages``, in their order."""

    name: str
    language: str
    packages: tuple[Package, ...]
    clips: Callable[[list[Path]], Iterator[Clip]]


def _core(language: str, version: str, audio_sha: str, text_sha: str) -> Source:
    return Source(
        f"asterisk-core-sounds-{language}-g722",
        {"fr": "fr-CA"}.get(language, language),
        (
            Package(f"asterisk-core-sounds-{language}-g722", version, audio_sha),
            Package(f"asterisk-core-sounds-{language}", version, text_sha),
        ),
        lambda roots: asterisk.core(roots[0], roots[1]),
    )


def _one(
    name: str, language: str, version: str, sha: str, clips: Callable[[Path], Iterator[Clip]]
) -> Source:
    return Source(name, language, (Package(name, version, sha),), lambda roots: clips(roots[0]))


DRASCULA = Package(
    "drascula", "1.0+ds4-2", "ed4af8e2d41ad446e2f3b73533daa1804e2f13f62f596c0b02b8dc39544f22b4"
)

_SOURCES = (
    # English
    _one(
        "flight-of-the-amazon-queen",
        "en",
        "1.0.0-9",
        "40c08fd258d6fe95c46c1eaf5e9137f84ba330657995a281bd887c94a560a0f1",
        queen.clips,
    ),
    _one(
        "beneath-a-steel-sky",
        "en",
        "0.0372-8",
        "e2a25c880220c26a4dfd42904b878cc655afa1c72895f9c932befbd078622934",
        sky.clips,
    ),
    Source("drascula", "en", (DRASCULA,), lambda roots: drascula.clips(roots[0], roots[0], "en")),
    _one(
        "warzone2100-data",
        "en",
        "4.3.3-3",
        "53ad292569e0bf9d16de1642d13629f29ed5dfb68896787e4c65ac60edc07d3d",
        games.warzone,
    ),
    _one(
        "hedgewars-data",
        "en",
        "1.0.2-6",
        "722225903a72604403e6e0026e40e9a6953f47a74d94efc5f55504bc05bb4761",
        games.hedgewars,
    ),
    _one(
        "megaglest-data",
        "en",
        "3.13.0-3",
        "ed4783d9fc78e201a548b266f7c30325eb16cfd58a20bf4597dd6e622f84a07e",
        games.megaglest,
    ),
    _one(
        "codec2-examples",
        "en",
        "1.0.5-1",
        "7af8cd128f269a1d8116993c9d2bd7d4d452fc17da46a09899aaca2b9bd993d4",
        codec2.clips,
    ),
    # other languages
    _one(
        "tuxpaint-stamps-default",
        "mul",
        "2022.06.04-1",
        "6db6c1bfc870a47f1499d6203b083522eacb57c5f9c87d468f2e92eb6d9d5f34",
        tuxpaint.clips,
    ),
    _one(
        "fillets-ng-data-cs",
        "cs",
        "1.0.1-1.1",
        "3ecef99b9456f1c80c9625c6f2418642b52d58e7167a46bad7a412db17991b14",
        lambda root: games.fillets(root, "cs"),
    ),
    _one(
        "fillets-ng-data-nl",
        "nl",
        "1.0.1-1.1",
        "afb4443fda9ab507dee578b75be857d121718a1cd6017a474f30e0eb13dc9d10",
        lambda root: games.fillets(root, "nl"),
    ),
    _core(
        "fr",
        "1.6.1-1",
        "7add61d5e42279ecff1bbdf842a5a946ac3644fac9a0fe44384731aa7270c8e0",
        "04c82c78c570c43a7136cbc5e2488d0c470b775468dff9fbce4a131b18cf1056",
    ),
    _core(
        "it",
        "1.6.1-1",
        "46b4cf7afc508a5fcfc051b7ea233251c0d195dd4ef83cc4b7facb4c6429b016",
        "3884d9457e12f21caa018c18f0d587df5d53ebea14b673d8453a134c5941ab3b",
    ),
    _core(
        "ru",
        "1.6.1-1",
        "673b4238a6b8269960f055d868c6a11083f7a0d00979167cb01554046b48ed9b",
        "28a61616bb0cd3345a7ea532dec4df9f071e5d0fa9f8c1a563ea9669002f39ab",
    ),
    _one(
        "asterisk-prompt-it-menardi-wav",
        "it",
        "1:1.4.22+mm20110907-3.1",
        "3094530d98f8758ac275572d59624c41f60969fef883f34f4886d144f3dfeb21",
        asterisk.prompts,
    ),
    _one(
        "asterisk-prompt-fr-armelle",
        "fr",
        "20070613-2.2",
        "162570b1a9b3512a98f06b89f60c7c17cf1b9b52297315adca9a4e5be728bea3",
        asterisk.prompts,
    ),
    _one(
        "asterisk-prompt-es-co",
        "es-CO",
        "0.20070403-2.1",
        "6702696e045514699e87dc8fb70f370717e5df91f821f7bec8dd0df1be008e83",
        asterisk.prompts,
    ),
    Source(
        "drascula-spanish",
        "es",
        (
            Package(
                "drascula-spanish",
                "1.0+ds4-2",
                "87b5f12df3fcd7ca16097c802dff1ab55e40c9ebc21209fa3f031e1661b4b8e5",
            ),
            DRASCULA,  # its drascula.dat, which holds the Spanish text too
        ),
        lambda roots: drascula.clips(roots[0], roots[1], "es"),
    ),
)
SOURCES = {source.name: source for source in _SOURCES}
PACKAGES = {package.name: package for source in _SOURCES for package in source.packages}


def allowed(name: str) -> Source:
    """The source ``name``; a ValueError naming it if it is not on the allowed list."""
    if name not in SOURCES:
        raise ValueError(
            f"{name}: not on the allowed list of real recordings (docs/real_audio.md); "
            "every other package's speech is held out and never fetched"
        )
    return SOURCES[name]
