"""A held-out, web-like corpus for the quality filters, built from what this machine holds: documentation prose
(package READMEs and descriptions, the standard library's docstrings), German, French and Spanish prose, and planted
bad documents of every kind the FineWeb recipe is meant to drop or rewrite."""

from __future__ import annotations

import ast
import random
import re
import sysconfig
from pathlib import Path

FOREIGN = {
    "de": "Die Stadt liegt am Ufer eines großen Flusses und ist seit dem Mittelalter ein wichtiger Handelsplatz. "
    "Viele Menschen kommen jedes Jahr hierher, um die alten Kirchen und die schmalen Gassen zu besuchen. "
    "Im Sommer finden auf dem Marktplatz zahlreiche Konzerte statt, die von der Stadtverwaltung organisiert werden. "
    "Die Universität wurde im vierzehnten Jahrhundert gegründet und gehört zu den ältesten des Landes. "
    "Wer mit dem Zug anreist, erreicht das Zentrum in wenigen Minuten zu Fuß vom Hauptbahnhof aus. "
    "Die Einwohner sind stolz auf ihre Geschichte, aber sie blicken auch mit Zuversicht in die Zukunft.",
    "fr": "La ville se trouve au bord d'un grand fleuve et elle est depuis le Moyen Âge un lieu de commerce important. "
    "Chaque année, de nombreux visiteurs viennent découvrir les vieilles églises et les ruelles étroites. "
    "En été, la place du marché accueille de nombreux concerts organisés par la municipalité. "
    "L'université a été fondée au quatorzième siècle et compte parmi les plus anciennes du pays. "
    "Ceux qui arrivent en train peuvent rejoindre le centre à pied en quelques minutes depuis la gare. "
    "Les habitants sont fiers de leur histoire, mais ils regardent aussi l'avenir avec confiance.",
    "es": "La ciudad se encuentra a orillas de un gran río y desde la Edad Media es un importante centro comercial. "
    "Cada año muchas personas vienen a visitar las iglesias antiguas y las calles estrechas del casco histórico. "
    "En verano, la plaza del mercado acoge numerosos conciertos organizados por el ayuntamiento. "
    "La universidad fue fundada en el siglo catorce y es una de las más antiguas del país. "
    "Quien llega en tren puede alcanzar el centro a pie en pocos minutos desde la estación principal. "
    "Los habitantes están orgullosos de su historia, pero también miran el futuro con confianza.",
}


def _paragraphs() -> list[str]:
    """English prose on this machine: the Python language reference (pydoc's topics), package descriptions and
    license texts, the standard library's module docstrings."""
    from pydoc_data.topics import topics

    paths = sysconfig.get_paths()
    site, stdlib = Path(paths["purelib"]), Path(paths["stdlib"])
    texts = [topics[k] for k in sorted(topics)]
    texts += [p.read_text(errors="replace") for p in sorted(site.glob("*.dist-info/METADATA"))]
    texts += [p.read_text(errors="replace") for p in sorted(site.glob("*.dist-info/LICENSE*"))]
    for p in sorted(stdlib.glob("*.py")):
        try:
            texts.append(ast.get_docstring(ast.parse(p.read_text(errors="replace"))) or "")
        except (SyntaxError, ValueError):
            continue
    paras = [p.strip() for t in texts for p in re.split(r"\n\s*\n", t)]
    return [p for p in paras if len(p) > 40 and p.endswith(".") and _prose(p)]


def _prose(paragraph: str) -> bool:
    """Mostly words, as a web page's text is (documentation's code examples and tables are not)."""
    words = paragraph.split()
    return sum(bool(_WORD.fullmatch(w)) for w in words) >= 0.85 * len(words)


_WORD = re.compile(r"[(\"']?[A-Za-z][a-z'’-]*[.,;:)\"'!?]*")


def _documents(paras: list[str], rng: random.Random) -> list[str]:
    """Consecutive paragraphs grouped into documents of about 500 to 4,000 characters."""
    docs, cur, target = [], [], rng.randint(500, 4000)
    for p in paras:
        cur.append(p)
        if sum(map(len, cur)) >= target:
            docs.append("\n\n".join(cur))
            cur, target = [], rng.randint(500, 4000)
    return docs


def _plant(doc: str, kind: str, rng: random.Random) -> str:
    """`doc` spoiled in one way a web page is."""
    lines = doc.split("\n")
    n = len(lines)
    pick = lambda k: sorted(rng.sample(range(n), min(n, k)))  # noqa: E731
    if kind == "repeated_lines":
        return "\n".join(lines + [lines[i] for i in pick(max(1, n // 2))])
    if kind == "repeated_paragraphs":
        paras = doc.split("\n\n")
        return "\n\n".join(paras + paras[: max(1, len(paras) // rng.randint(1, 3))])
    if kind == "few_words":
        return " ".join(doc.split()[: rng.randint(5, 60)])
    if kind == "symbols":
        return "\n".join(x + rng.choice([" ###", " # # #", " ...", " …", " * * *"]) for x in lines)
    if kind == "bullets":
        return "\n".join(rng.choice(["- ", "• ", "* ", ""]) + x for x in lines)
    if kind == "ellipsis":
        return "\n".join(x.rstrip(".") + ("..." if rng.random() < 0.5 else "") for x in lines)
    if kind == "lorem":
        return doc + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor."
    if kind == "javascript":
        at = rng.randrange(n + 1)
        return "\n".join(lines[:at] + ["Please enable JavaScript in your browser to see this page."] + lines[at:])
    if kind == "policy":
        return doc + "\nBy using this site you agree to our Terms of Use and Privacy Policy. This site uses cookies."
    if kind == "curly":
        return doc + "\nvar config = { debug: true, retries: 3 };"
    if kind == "long_word":
        return doc + "\nThe token was " + "x" * rng.randint(900, 1100) + " and nothing else."
    if kind == "citations":
        return "\n".join(x + rng.choice(["[1]", "[edit]", "[citation needed]", ""]) for x in lines)
    if kind == "short_lines":
        return "\n".join(w for x in lines for w in re.split(r"(?<=[,.;:]) ", x))
    if kind == "foreign":
        lang = rng.choice(sorted(FOREIGN))
        sentences = re.split(r"(?<=\.) ", FOREIGN[lang])
        return "\n".join(" ".join(rng.sample(sentences, len(sentences))) for _ in range(rng.randint(1, 4)))
    raise ValueError(kind)


KINDS = (
    "repeated_lines",
    "repeated_paragraphs",
    "few_words",
    "symbols",
    "bullets",
    "ellipsis",
    "lorem",
    "javascript",
    "policy",
    "curly",
    "long_word",
    "citations",
    "short_lines",
    "foreign",
)


def web_like(n: int, seed: int = 44, planted: float = 0.5) -> list[str]:
    """`n` documents: about `planted` of them spoiled (one kind each, every kind present), the rest clean prose."""
    rng = random.Random(seed)
    clean = _documents(_paragraphs(), rng)
    rng.shuffle(clean)
    docs = []
    for i in range(n):
        doc = clean[i % len(clean)]
        docs.append(_plant(doc, KINDS[i % len(KINDS)], rng) if rng.random() < planted or i < len(KINDS) else doc)
    return docs
