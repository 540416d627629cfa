"""Write the bundled sample crawl, ``pipelines/sample/sample.warc.gz``.

The sample lets ``python -m pipelines.run sample`` and the tests run offline on a crawl whose content
is known: every capture carries a ``sample-kind`` label in its ``metadata`` record, so a test can check
that spam was dropped, duplicates clustered and foreign pages routed by language. The layout follows a
Common Crawl WARC: a ``warcinfo`` record, then per capture ``request``, ``response`` and ``metadata``
records, one gzip member each.

Everything is derived from a fixed seed and fixed timestamps, so rerunning the generator reproduces the
same records (the gzip bytes also match as long as zlib compresses the same way).

Run: ``python -m scripts.sample.make_sample [--out PATH]``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import io
import random
import re
import struct
import unicodedata
import uuid
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from common.cli import ArgumentParser
from scripts.sample import texts

SEED = 20240221
DEFAULT_OUT = Path(__file__).with_name("sample.warc.gz")
WARC_FILENAME = "sample.warc.gz"
CRAWL_START = datetime(2024, 2, 21, 3, 12, 5, tzinfo=UTC)

# How many pages of each kind the sample holds. Tests read the labels back from the metadata records.
N_GOOD = 140
N_BOILERPLATE = 30
N_SPAM = 25
N_NEAR_DUP = 25
N_EXACT_DUP = 5

USER_AGENT = "CCBot/2.0 (https://commoncrawl.org/faq/)"
SERVERS = ("nginx", "nginx/1.24.0", "Apache/2.4.58 (Ubuntu)", "cloudflare", "LiteSpeed", "Microsoft-IIS/10.0")

SITES: dict[str, tuple[str, ...]] = {
    "science": ("www.fieldnotes-science.com", "curiouslab-journal.org"),
    "cooking": ("www.example-kitchen-diary.com", "slowpan-recipes.net"),
    "travel": ("www.wanderlight-travels.com", "railandtrail-blog.net"),
    "history": ("www.oldmaps-history.org", "harbourarchive-stories.com"),
    "software": ("blog.tidycode-notes.dev", "www.legacyrefactor-weekly.io"),
    "sports": ("www.amateur-sidelines.com", "longrun-club-journal.org"),
    "gardening": ("www.example-gardening-blog.com", "balconyplot-diaries.net"),
    "finance": ("www.plainmoney-guide.com", "thriftledger-blog.org"),
    "health": ("www.everyday-wellness-notes.com", "calmhabits-journal.net"),
    "astronomy": ("www.backyard-skywatch.org",),
    "music": ("www.latebloomer-music.com",),
    "home": ("www.fixitweekend-blog.com",),
    "nature": ("www.gardenbird-log.org",),
    "photography": ("www.duskandlight-photo.com",),
}
MIRRORS = (
    "www.contentmirror-hub.net",
    "feeds.newsroundup-aggregator.com",
    "syndication.readwise-digest.org",
    "archive.copypaste-articles.info",
    "www.topstories-reposted.com",
)
SPAM_DOMAINS = (
    "buy-cheap-pills-online.biz",
    "best-casino-bonus-free.xyz",
    "cheap-replica-watches-sale.info",
    "payday-loans-fast-cash.top",
    "free-followers-instant.click",
    "cheap-essay-writing-now.online",
    "weight-loss-miracle-pills.shop",
    "crypto-double-your-money.site",
    "www.localnews-comments.com",
    "forum.hobby-talk-board.net",
)
FOREIGN_SITES: dict[str, tuple[str, ...]] = {
    "de": ("www.gartenfreunde-beispiel.de", "www.bahnreisen-notizen.de", "www.brotbacken-blog.de"),
    "fr": ("www.marche-du-samedi.fr", "www.carnet-de-randonnee.fr"),
    "es": ("www.recetas-de-la-abuela.es", "www.viajar-en-tren.es"),
    "it": ("www.cucina-di-casa.it", "www.colline-toscane-blog.it"),
    "pt": ("www.receitas-da-vovo.com.br", "www.lisboa-a-pe.pt"),
    "nl": ("www.fietsen-en-koken.nl", "www.polder-verhalen.nl"),
    "ru": ("www.derevenskie-zametki.ru",),
    "zh": ("www.caiyuan-riji.cn",),
    "ja": ("www.kyoto-sanpo.jp",),
    "pl": ("www.gorskie-wedrowki.pl",),
}

# Other-language pages: (language, byte encoding, header charset or None, meta charset or None, note).
# Declared charsets that disagree with the bytes are deliberate: they are what a robust decoder must
# survive. Rows marked "wrong" or "conflict" are labelled in the metadata record.
FOREIGN_PAGES: tuple[tuple[str, str, str | None, str | None, str], ...] = (
    ("de", "iso-8859-1", "ISO-8859-1", "iso-8859-1", "legacy"),
    ("de", "iso-8859-1", "ISO-8859-1", None, "legacy"),
    ("de", "windows-1252", "windows-1252", "windows-1252", "legacy"),
    ("de", "windows-1252", "utf-8", "utf-8", "wrong"),  # declares UTF-8, bytes are cp1252
    ("de", "utf-8", "utf-8", "utf-8", "ok"),
    ("de", "utf-8", "UTF-8", "utf-8", "ok"),
    ("fr", "windows-1252", "windows-1252", "windows-1252", "legacy"),
    ("fr", "utf-8", "iso-8859-1", "utf-8", "conflict"),  # header says latin-1, meta (right) says utf-8
    ("fr", "utf-8", "utf-8", "utf-8", "ok"),
    ("fr", "utf-8", "utf-8", None, "ok"),
    ("fr", "utf-8", "UTF-8", "utf-8", "ok"),
    ("es", "iso-8859-1", "iso-8859-1", "iso-8859-1", "legacy"),
    ("es", "utf-8", None, "utf-8", "meta-only"),
    ("es", "utf-8", None, None, "undeclared"),
    ("es", "utf-8", "utf-8", "utf-8", "ok"),
    ("es", "utf-8", "utf-8", "utf-8", "ok"),
    ("it", "windows-1252", "windows-1252", None, "legacy"),
    ("it", "utf-8", "iso-8859-1", "iso-8859-1", "wrong"),  # bytes are utf-8, everything says latin-1
    ("it", "utf-8", "utf-8", "utf-8", "ok"),
    ("it", "utf-8", "utf-8", "utf-8", "ok"),
    ("it", "utf-8", "utf-8", None, "ok"),
    ("pt", "iso-8859-1", "ISO-8859-1", "iso-8859-1", "legacy"),
    ("pt", "utf-8", "utf-8", "utf-8", "ok"),
    ("pt", "utf-8", "utf-8", "utf-8", "ok"),
    ("pt", "utf-8", "utf-8", None, "ok"),
    ("nl", "utf-8", "windows-1252", None, "wrong"),  # utf-8 bytes declared as cp1252
    ("nl", "utf-8", "utf-8", "utf-8", "ok"),
    ("nl", "utf-8", "utf-8", "utf-8", "ok"),
    ("nl", "utf-8", "utf-8", None, "ok"),
    ("ru", "windows-1251", "windows-1251", "windows-1251", "legacy"),
    ("ru", "koi8-r", "koi8-r", "koi8-r", "legacy"),
    ("ru", "koi8-r", "windows-1251", "koi8-r", "conflict"),  # header wrong, meta right
    ("zh", "gbk", "gbk", "gbk", "legacy"),
    ("zh", "gbk", None, "gb2312", "meta-only"),
    ("zh", "utf-8", "utf-8", "utf-8", "ok"),
    ("ja", "shift_jis", "Shift_JIS", "Shift_JIS", "legacy"),
    ("ja", "euc-jp", "EUC-JP", "euc-jp", "legacy"),
    ("ja", "utf-8", "utf-8", "utf-8", "ok"),
    ("pl", "iso-8859-2", "iso-8859-2", "iso-8859-2", "legacy"),
    ("pl", "utf-8", "utf-8", "utf-8", "ok"),
)
HTML_LANG = {
    "en": "en-US",
    "de": "de-DE",
    "fr": "fr-FR",
    "es": "es-ES",
    "it": "it-IT",
    "pt": "pt-PT",
    "nl": "nl-NL",
    "ru": "ru-RU",
    "zh": "zh-CN",
    "ja": "ja-JP",
    "pl": "pl-PL",
}


@dataclass
class Capture:
    """One fetched URL: what goes into its request, response and metadata records."""

    kind: str
    url: str
    body: bytes
    content_type: str | None  # the HTTP Content-Type header, None to leave it out
    status: str = "200 OK"
    payload_type: str | None = "text/html"  # WARC-Identified-Payload-Type, None to leave it out
    language: str | None = "en"
    charset: str | None = "utf-8"  # encoding of the bytes, for the metadata record
    headers: list[tuple[str, str]] = field(default_factory=list)  # extra HTTP headers
    warc_headers: dict[str, str] = field(default_factory=dict)  # extra WARC headers
    http_length: int | None = None  # HTTP Content-Length when it differs from len(body)
    note: str = ""


@dataclass
class Article:
    """A good English article, kept so near-duplicates can be derived from it."""

    title: str
    author: str
    published: datetime
    topic: str
    paragraphs: list[str]  # lede + this article's variants of the pool paragraphs
    url: str
    base: list[str] = field(default_factory=list)  # the pool paragraphs the variants came from


# --------------------------------------------------------------------------------------------- helpers


def slugify(text: str) -> str:
    """ASCII URL slug, the way most CMSs build one from a title."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:60] or "page"


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def sha1_b32(data: bytes) -> str:
    """The digest format WARC-Payload-Digest uses, so a revisit can point at an earlier payload."""
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def nav_html(links: Sequence[tuple[str, str]], cls: str = "menu") -> str:
    items = "".join(f'<li class="menu-item"><a href="{esc(h)}">{esc(t)}</a></li>' for h, t in links)
    return f'<ul class="{cls}">{items}</ul>'


def paragraphs_html(paras: Sequence[str], rng: random.Random, subheads: Sequence[str] = ()) -> str:
    out = []
    for i, p in enumerate(paras):
        if subheads and i and i % 3 == 0:
            out.append(f"<h2>{esc(rng.choice(subheads))}</h2>")
        out.append(f"<p>{esc(p)}</p>")
    return "\n".join(out)


def cookie_banner(lang: str) -> str:
    ui = texts.UI[lang]
    return (
        f'<div id="cookie-consent" class="cookie-banner" role="dialog" aria-live="polite">'
        f'<p>{esc(str(ui["cookie"]))} <a href="/privacy/">{esc(str(ui["privacy"]))}</a></p>'
        f'<button type="button" class="btn-accept">{esc(str(ui["accept"]))}</button></div>'
    )


def analytics_script(site_id: int) -> str:
    return (
        "<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments);}"
        f"gtag('js',new Date());gtag('config','G-SAMPLE{site_id:05d}');</script>"
    )


def head_html(p: PageParts) -> str:
    charset = f'<meta charset="{p.meta_charset}">' if p.meta_charset else ""
    return (
        f'<head>{charset}<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{esc(p.title)}</title><meta name="description" content="{esc(p.description)}">'
        f'<meta property="og:title" content="{esc(p.title)}"><meta property="og:type" content="article">'
        f'<link rel="canonical" href="https://{p.domain}/"><link rel="stylesheet" href="/assets/css/main.css'
        f'?v={p.site_id}"><link rel="icon" href="/favicon.png">{analytics_script(p.site_id)}</head>'
    )


# ---------------------------------------------------------------------------------------------- themes
# Four page skeletons, so boilerplate differs between sites the way it does on the web: a WordPress-like
# blog, a news portal, a static-site-generator page and an old table layout.


@dataclass
class PageParts:
    lang: str
    title: str
    domain: str
    site_name: str
    meta_charset: str | None
    main: str  # inner HTML of the article or main area
    description: str = ""
    nav: list[tuple[str, str]] = field(default_factory=list)
    sidebar: list[tuple[str, str]] = field(default_factory=list)
    footer: list[tuple[str, str]] = field(default_factory=list)
    cookie: bool = True
    site_id: int = 1


def theme_blog(p: PageParts) -> str:
    ui = texts.UI[p.lang]
    side = nav_html(p.sidebar, "widget-list")
    return (
        f'<!DOCTYPE html><html lang="{HTML_LANG[p.lang]}">'
        f"{head_html(p)}"
        f'<body class="post-template-default single single-post"><div id="page" class="site">'
        f'<a class="skip-link screen-reader-text" href="#content">Skip to content</a>'
        f'<header id="masthead" class="site-header"><div class="site-branding"><p class="site-title">'
        f'<a href="/" rel="home">{esc(p.site_name)}</a></p></div>'
        f'<nav id="site-navigation" class="main-navigation">{nav_html(p.nav)}</nav></header>'
        f'<div id="content" class="site-content"><main id="primary" class="site-main">'
        f'<article class="post type-post status-publish format-standard">{p.main}</article></main>'
        f'<aside id="secondary" class="widget-area"><section class="widget widget_recent_entries">'
        f'<h2 class="widget-title">{esc(str(ui["related"]))}</h2>{side}</section>'
        f'<section class="widget widget_search"><form role="search" action="/"><input type="search" '
        f'name="s" placeholder="{esc(str(ui["search"]))}"></form></section></aside></div>'
        f'<footer id="colophon" class="site-footer">{nav_html(p.footer, "footer-menu")}'
        f'<div class="site-info">&copy; 2024 {esc(p.site_name)}. {esc(str(ui["rights"]))}</div></footer>'
        f"</div>{cookie_banner(p.lang) if p.cookie else ''}"
        f'<script src="/wp-includes/js/jquery/jquery.min.js?ver=3.7.1"></script></body></html>'
    )


def theme_news(p: PageParts) -> str:
    ui = texts.UI[p.lang]
    return (
        f'<!DOCTYPE html><html lang="{HTML_LANG[p.lang]}">'
        f"{head_html(p)}<body>"
        f'<div class="top-bar"><span class="date">Wednesday, 21 February 2024</span>'
        f'<a href="/subscribe" class="btn">Subscribe</a> <a href="/login">Sign in</a></div>'
        f'<div class="masthead"><a class="logo" href="/">{esc(p.site_name)}</a></div>'
        f'<div class="mega-menu">{nav_html(p.nav, "nav-primary")}</div>'
        f'<div class="ad-slot ad-leaderboard" data-ad-unit="top_728x90"></div>'
        f'<div class="container"><div class="col-main"><div class="article-body">{p.main}</div>'
        f'<div class="newsletter-signup"><h3>Get the morning briefing</h3><form action="/newsletter">'
        f'<input type="email" name="email" placeholder="Email address"><button>Sign up</button></form>'
        f'</div></div><div class="col-side"><div class="most-read"><h3>Most read</h3>'
        f'{nav_html(p.sidebar, "most-read-list")}</div><div class="ad-slot ad-mpu"></div></div></div>'
        f'<div class="site-footer"><div class="footer-links">{nav_html(p.footer, "footer-nav")}</div>'
        f'<p class="legal">&copy; 2024 {esc(p.site_name)} Media Group. {esc(str(ui["rights"]))}</p></div>'
        f"{cookie_banner(p.lang) if p.cookie else ''}</body></html>"
    )


def theme_static(p: PageParts) -> str:
    ui = texts.UI[p.lang]
    return (
        f'<!doctype html>\n<html lang="{HTML_LANG[p.lang]}">\n'
        f"{head_html(p)}\n<body>\n"
        f'<header class="site-header"><a class="brand" href="/">{esc(p.site_name)}</a>\n'
        f"<nav>{nav_html(p.nav, 'nav')}</nav></header>\n<main>\n<article>\n{p.main}\n</article>\n"
        f'<section class="related"><h2>{esc(str(ui["related"]))}</h2>{nav_html(p.sidebar, "related")}'
        f"</section>\n</main>\n<footer><nav>{nav_html(p.footer, 'footer')}</nav>"
        f"<p>{esc(str(ui['rights']))} Built with a static site generator.</p></footer>\n"
        f"{cookie_banner(p.lang) if p.cookie else ''}\n</body>\n</html>\n"
    )


def theme_legacy(p: PageParts) -> str:
    ui = texts.UI[p.lang]
    links = " | ".join(f'<a href="{esc(h)}">{esc(t)}</a>' for h, t in p.nav)
    side = "<br>".join(f'<a href="{esc(h)}">{esc(t)}</a>' for h, t in p.sidebar)
    foot = " - ".join(f'<a href="{esc(h)}">{esc(t)}</a>' for h, t in p.footer)
    charset = (
        f'<meta http-equiv="Content-Type" content="text/html; charset={p.meta_charset}">'
        if p.meta_charset
        else ""
    )
    return (
        '<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN">\n'
        f"<html><head>{charset}<title>{esc(p.title)}</title></head>\n"
        '<body bgcolor="#ffffff"><table width="100%" border="0" cellpadding="4"><tr>'
        f'<td colspan="2" bgcolor="#336699"><font color="#ffffff" size="5">{esc(p.site_name)}</font>'
        f'</td></tr><tr><td colspan="2"><font size="2">{links}</font></td></tr><tr>'
        f'<td width="180" valign="top"><font size="2">{side}</font></td><td valign="top">{p.main}</td>'
        f'</tr><tr><td colspan="2" align="center"><font size="1">{foot}<br>'
        f"{esc(str(ui['rights']))}</font></td></tr></table></body></html>\n"
    )


THEMES = {"blog": theme_blog, "news": theme_news, "static": theme_static, "legacy": theme_legacy}


# -------------------------------------------------------------------------------------------- builders


class SampleBuilder:
    """Builds every capture from one seeded RNG, in a fixed order."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.used_urls: set[str] = set()
        self.site_ids: dict[str, int] = {}
        self.articles: list[Article] = []
        self.captures: list[Capture] = []
        self.used_variants: set[str] = set()

    # ---- shared pieces

    def site_id(self, domain: str) -> int:
        return self.site_ids.setdefault(domain, len(self.site_ids) + 1)

    def site_name(self, domain: str) -> str:
        core = domain.removeprefix("www.").removeprefix("blog.").split(".")[0]
        return " ".join(w.capitalize() for w in core.split("-") if w != "example") or core

    def unique_url(self, url: str) -> str:
        if url in self.used_urls:
            base, n = url.rstrip("/"), 2
            while f"{base}-{n}" in self.used_urls:
                n += 1
            url = f"{base}-{n}"
        self.used_urls.add(url)
        return url

    def chrome(self, lang: str, n_nav: int = 0, n_side: int = 6, n_foot: int = 8) -> dict[str, list]:
        """Navigation, sidebar and footer links; n_nav > 0 adds that many extra category links."""
        ui = texts.UI[lang]
        nav = [("/", ui["nav"][0])] + [(f"/{slugify(str(t))}/", str(t)) for t in ui["nav"][1:]]
        topics = list(texts.TITLES)
        for i in range(n_nav):
            t = topics[i % len(topics)]
            nav.append(
                (f"/category/{t}/page/{i // len(topics) + 1}/", f"{t.capitalize()} {i // len(topics) + 1}")
            )
        titles = [a.title for a in self.articles] or [t for ts in texts.TITLES.values() for t in ts]
        side = [(f"/{slugify(t)}/", t) for t in self.rng.sample(titles, min(n_side, len(titles)))]
        foot_names = [
            "About us",
            "Contact",
            "Advertise",
            "Careers",
            "Privacy policy",
            "Terms of use",
            "Cookie settings",
            "Accessibility",
            "Sitemap",
            "RSS",
            "Press",
            "Help",
        ]
        foot = [(f"/{slugify(n)}/", n) for n in foot_names[:n_foot]]
        for i in range(max(0, n_foot - len(foot_names))):
            foot.append(
                (f"/archive/{2010 + i // 12}/{i % 12 + 1:02d}/", f"Archive {2010 + i // 12}-{i % 12 + 1:02d}")
            )
        return {"nav": nav, "sidebar": side, "footer": foot}

    def html_capture(
        self,
        kind: str,
        url: str,
        page: str,
        *,
        lang: str = "en",
        encoding: str = "utf-8",
        header_charset: str | None = "UTF-8",
        note: str = "",
        status: str = "200 OK",
    ) -> Capture:
        ctype = f"text/html; charset={header_charset}" if header_charset else "text/html"
        headers = [("Cache-Control", "max-age=600"), ("Vary", "Accept-Encoding")]
        if self.rng.random() < 0.5:
            headers.append(("X-Crawler-Content-Encoding", "gzip"))
        return Capture(
            kind=kind,
            url=url,
            body=page.encode(encoding),
            content_type=ctype,
            language=lang,
            charset=encoding,
            headers=headers,
            note=note,
            status=status,
        )

    def page(
        self, theme: str, domain: str, lang: str, title: str, charset: str | None, main: str, description: str, **more
    ) -> str:
        """A page in ``theme`` on ``domain``'s site (its name and id filled in); ``more``: links, cookie banner."""
        site_name, site_id = self.site_name(domain), self.site_id(domain)
        parts = PageParts(lang, title, domain, site_name, charset, main, description, site_id=site_id, **more)
        return THEMES[theme](parts)

    def byline(self, author: str, published: datetime) -> str:
        return (
            f'<div class="entry-meta byline">By <a rel="author" href="/author/{slugify(author)}/">'
            f'{esc(author)}</a> &middot; <time datetime="{published.isoformat()}">'
            f"{published.strftime('%B %d, %Y').replace(' 0', ' ')}</time></div>"
        )

    # ---- good English articles

    def good_articles(self) -> None:
        rng = self.rng
        by_topic: dict[str, list[str]] = {}
        for topic, para in texts.ENGLISH:
            by_topic.setdefault(topic, []).append(para)
        all_paras = [p for _, p in texts.ENGLISH]
        titles = [
            (t, base + q)
            for t, bases in texts.TITLES.items()
            for base in bases
            for q in texts.TITLE_QUALIFIERS
        ]
        rng.shuffle(titles)
        chosen_sets: list[frozenset[str]] = []
        for i in range(N_GOOD):
            topic, title = titles[i]
            for _attempt in range(200):
                # Lead with the paragraphs of the title's topic, then fill from the whole pool. Reject sets
                # that overlap an earlier article too much, so only the intended near-duplicates cluster.
                own = rng.sample(by_topic[topic], rng.randint(1, len(by_topic[topic])))
                rest = [p for p in all_paras if p not in own]
                paras = own + rng.sample(rest, max(0, rng.randint(4, 8) - len(own)))
                s = frozenset(paras)
                if all(len(s & c) / len(s | c) <= 0.35 for c in chosen_sets):
                    break
            chosen_sets.append(s)
            author = f"{rng.choice(texts.FIRST_NAMES)} {rng.choice(texts.LAST_NAMES)}"
            lede = rng.choice(texts.LEDES).format(author=author, place=rng.choice(texts.PLACES))
            published = datetime(2024, 1, 1, 8, tzinfo=UTC) + timedelta(minutes=rng.randrange(50 * 24 * 60))
            domain = rng.choice(SITES[topic])
            path = rng.choice(
                (
                    f"/{published:%Y/%m}/{slugify(title)}/",
                    f"/blog/{slugify(title)}",
                    f"/articles/{slugify(title)}-{rng.randrange(10000, 99999)}",
                    f"/{topic}/{slugify(title)}.html",
                )
            )
            url = self.unique_url(f"https://{domain}{path}")
            art = Article(title, author, published, topic, [lede, *(self.vary(p) for p in paras)], url, paras)
            self.articles.append(art)
        for i, art in enumerate(self.articles):
            self.captures.append(self.render_article("good", art, i))

    def vary(self, para: str) -> str:
        """A variant of a pool paragraph not used before (see texts.ASIDES for why)."""
        rng = self.rng
        sentences = re.split(r"(?<=[.!?])\s+", para)
        for _attempt in range(100):
            keep = list(sentences)
            for _ in range(rng.choice((0, 1, 1, 2))):
                if len(keep) > 4:
                    del keep[rng.randrange(1, len(keep))]
            if rng.random() < 0.6:
                keep.append(rng.choice(texts.ASIDES))
            variant = " ".join(keep)
            if variant not in self.used_variants:
                break
        self.used_variants.add(variant)
        return variant

    def retell(self, art: Article, suffix: str, url: str, base: list[str]) -> Article:
        """A second article by the same author on the same paragraphs, with fresh variants."""
        return Article(
            art.title + suffix,
            art.author,
            art.published,
            art.topic,
            [art.paragraphs[0]] + [self.vary(p) for p in base],
            url,
            base,
        )

    def render_article(
        self,
        kind: str,
        art: Article,
        i: int,
        *,
        theme: str | None = None,
        domain: str | None = None,
        url: str | None = None,
    ) -> Capture:
        rng = self.rng
        domain = domain or urlsplit(art.url).netloc
        theme = theme or list(THEMES)[self.site_id(domain) % 3]  # legacy layout only for foreign pages
        subheads = (
            "Getting started",
            "What to watch for",
            "A few practical tips",
            "Why it matters",
            "Common mistakes",
            "Going further",
        )
        main = (
            f'<header class="entry-header"><h1 class="entry-title">{esc(art.title)}</h1>'
            f"{self.byline(art.author, art.published)}</header>"
            f'<div class="entry-content">{paragraphs_html(art.paragraphs, rng, subheads)}</div>'
        )
        if i % 4 == 0:
            main += (
                '<div class="comments-area"><h3>2 comments</h3><ol class="comment-list">'
                "<li><b>Reader</b>: Thanks, this was really helpful.</li>"
                "<li><b>Guest</b>: Great post, bookmarked!</li></ol></div>"
            )
        chrome = self.chrome("en", n_nav=rng.randint(0, 6))
        title = f"{art.title} | {self.site_name(domain)}"
        cookie = rng.random() < 0.7
        page = self.page(theme, domain, "en", title, "utf-8", main, art.paragraphs[1][:150], cookie=cookie, **chrome)
        return self.html_capture(kind, url or art.url, page)

    # ---- near and exact duplicates

    def duplicates(self) -> None:
        rng = self.rng
        picks = rng.sample(range(N_GOOD), N_NEAR_DUP + N_EXACT_DUP)
        for n, idx in enumerate(picks[:N_NEAR_DUP]):
            src = self.articles[idx]
            paras = list(src.paragraphs)
            edit = n % 3
            j = rng.randrange(1, len(paras))
            sentences = re.split(r"(?<=[.!?])\s+", paras[j])
            k = rng.randrange(len(sentences))
            if edit == 0:  # swap one sentence
                sentences[k] = rng.choice(texts.SWAP_SENTENCES)
            elif edit == 1:  # drop one sentence
                del sentences[k]
            else:  # add one sentence
                sentences.insert(k, rng.choice(texts.SWAP_SENTENCES))
            paras[j] = " ".join(sentences)
            mirror = rng.choice(MIRRORS)
            copy = Article(
                src.title,
                src.author,
                src.published,
                src.topic,
                paras,
                self.unique_url(
                    f"https://{mirror}/{rng.choice(('feed/item', 'story', 'p'))}/"
                    f"{rng.randrange(100000, 999999)}/{slugify(src.title)}"
                ),
            )
            theme = ("news", "static", "blog")[n % 3]
            self.captures.append(self.render_article("near_duplicate", copy, n, theme=theme, domain=mirror))
        variants = ("?utm_source=newsletter&utm_medium=email", "?ref=homepage", "http", "index.html", "amp")
        for n, idx in enumerate(picks[N_NEAR_DUP:]):
            src_capture = self.captures[idx]  # good captures come first, in article order
            var = variants[n % len(variants)]
            url = src_capture.url
            if var == "http":
                url = "http://" + url.removeprefix("https://")
            elif var == "index.html":
                url = url.rstrip("/") + "/index.html"
            elif var == "amp":
                url = url.rstrip("/") + "/amp/"
            else:
                url = url + var
            self.captures.append(
                Capture(
                    **{
                        **src_capture.__dict__,
                        "kind": "exact_duplicate",
                        "url": self.unique_url(url),
                        "headers": list(src_capture.headers),
                    }
                )
            )

    # ---- boilerplate-heavy pages

    def boilerplate(self) -> None:
        rng = self.rng
        kinds = (
            "category",
            "tag",
            "search",
            "login",
            "contact",
            "sitemap",
            "soft404",
            "privacy",
            "gallery",
            "calendar",
        )
        domains = [d for ds in SITES.values() for d in ds] + ["www.citydirectory-portal.com"]
        for n in range(N_BOILERPLATE):
            sub = kinds[n % len(kinds)]
            domain = rng.choice(domains)
            chrome = self.chrome(
                "en", n_nav=rng.randint(30, 60), n_side=rng.randint(15, 30), n_foot=rng.randint(40, 90)
            )
            teasers = rng.sample(self.articles, 12)
            if sub in ("category", "tag"):
                label = rng.choice(list(texts.TITLES))
                page_no = rng.randint(2, 40)
                title = f"{label.capitalize()} Archives - Page {page_no}"
                items = "".join(
                    f'<div class="teaser"><h3><a href="/{slugify(a.title)}/">{esc(a.title)}</a></h3>'
                    f'<span class="meta">{a.published:%b %d, %Y}</span> '
                    f'<a class="more" href="/{slugify(a.title)}/">Read more &raquo;</a></div>'
                    for a in teasers
                )
                pager = "".join(f'<a href="/{sub}/{label}/page/{p}/">{p}</a> ' for p in range(1, 41))
                main = f"<h1>{esc(title)}</h1>{items}<div class='pagination'>{pager}</div>"
                path = f"/{sub}/{label}/page/{page_no}/"
            elif sub == "search":
                q = rng.choice(("roses", "budget", "marathon", "bread", "train"))
                title = f"Search results for \u201c{q}\u201d"
                main = f"<h1>{esc(title)}</h1>" + "".join(
                    f'<p class="result"><a href="/{slugify(a.title)}/">{esc(a.title)}</a></p>'
                    for a in teasers[:8]
                )
                path = f"/?s={q}&paged={rng.randint(1, 9)}"
            elif sub == "login":
                title = "Sign in"
                main = (
                    '<h1>Sign in to your account</h1><form method="post" action="/login"><label>Email '
                    '<input name="email"></label><label>Password <input type="password" name="pw"></label>'
                    '<button>Sign in</button></form><p><a href="/reset">Forgot password?</a> | '
                    '<a href="/register">Create an account</a></p>'
                )
                path = f"/login?redirect_to=%2F{rng.randint(1000, 9999)}"
            elif sub == "contact":
                title = "Contact us"
                main = (
                    "<h1>Contact</h1><p>Questions? Write to us.</p><address>Editorial office<br>"
                    f"{rng.randint(1, 200)} Harbour Street<br>Sampletown</address>"
                    '<form action="/contact"><textarea name="msg"></textarea><button>Send</button></form>'
                )
                path = "/contact/"
            elif sub == "sitemap":
                title = "Sitemap"
                main = "<h1>Sitemap</h1>" + nav_html(
                    [(f"/{slugify(a.title)}/", a.title) for a in teasers], "sitemap"
                )
                path = "/sitemap/"
            elif sub == "soft404":
                title = "Page not found"
                main = "<h1>Oops! That page can&rsquo;t be found.</h1><p>Try a search instead.</p>"
                path = f"/{rng.randint(2019, 2023)}/{rng.randint(1, 12):02d}/old-post-{rng.randint(1, 999)}/"
            elif sub == "privacy":
                title = "Privacy Policy"
                main = (
                    "<h1>Privacy Policy</h1><p>Last updated: January 2024.</p><ul><li>Cookies</li>"
                    "<li>Analytics</li><li>Your rights</li><li>Contact</li></ul>"
                )
                path = "/privacy-policy/"
            elif sub == "gallery":
                title = f"Photo gallery {rng.randint(1, 80)}"
                main = f"<h1>{esc(title)}</h1>" + "".join(
                    f'<a href="/gallery/img-{k}.jpg"><img src="/gallery/thumb-{k}.jpg" alt="Photo {k}"></a>'
                    for k in range(40)
                )
                path = f"/gallery/{slugify(title)}/"
            else:
                month = rng.randint(1, 12)
                title = f"Archive: 2023-{month:02d}"
                main = (
                    f"<h1>{esc(title)}</h1><table class='calendar'>"
                    + "".join(
                        "<tr>"
                        + "".join(
                            f'<td><a href="/2023/{month:02d}/{d:02d}/">{d}</a></td>'
                            for d in range(w * 7 + 1, min(w * 7 + 8, 32))
                        )
                        + "</tr>"
                        for w in range(5)
                    )
                    + "</table>"
                )
                path = f"/2023/{month:02d}/"
            url = self.unique_url(f"https://{domain}{path}")
            full_title = f"{title} | {self.site_name(domain)}"
            page = self.page(("blog", "news")[n % 2], domain, "en", full_title, "UTF-8", main, title, **chrome)
            self.captures.append(self.html_capture("boilerplate", url, page, note=sub))

    # ---- spam

    def spam(self) -> None:
        rng = self.rng
        offers = {
            "buy-cheap-pills-online.biz": ("cheap pills", "buy pills online", "no prescription pills"),
            "best-casino-bonus-free.xyz": ("casino bonus", "free spins", "best online casino"),
            "cheap-replica-watches-sale.info": ("replica watches", "cheap luxury watches", "watches sale"),
            "payday-loans-fast-cash.top": ("payday loans", "fast cash", "instant loan approval"),
            "free-followers-instant.click": ("free followers", "instant likes", "grow followers fast"),
            "cheap-essay-writing-now.online": ("cheap essays", "essay writing service", "buy essay now"),
            "weight-loss-miracle-pills.shop": ("weight loss pills", "lose weight fast", "miracle diet"),
            "crypto-double-your-money.site": ("double your bitcoin", "crypto profits", "guaranteed returns"),
            "www.localnews-comments.com": ("cheap flights", "best deals", "discount codes"),
            "forum.hobby-talk-board.net": ("cheap jerseys", "free gift cards", "work from home"),
        }
        for n in range(N_SPAM):
            domain = SPAM_DOMAINS[n % len(SPAM_DOMAINS)]
            kw = offers[domain]
            style = n % 5
            if style == 0:  # keyword stuffing
                words = [rng.choice(kw) for _ in range(160)]
                body = "<p>" + " ".join(words) + "</p>"
                body += f"<p>{esc(kw[0])} {esc(kw[1])} {esc(kw[2])} {esc(kw[0])} {esc(kw[0])}</p>" * 6
            elif style == 1:  # the same line over and over
                line = f"Best {kw[0]} online! Click here for {kw[1]} today!"
                body = "".join(f"<p>{esc(line)}</p>" for _ in range(40))
            elif style == 2:  # shouting
                body = "".join(
                    f"<h2>{esc(s)}</h2>"
                    for s in (
                        f"BUY {kw[0].upper()} NOW!!!",
                        "LIMITED OFFER!!! 90% OFF!!!",
                        f"{kw[1].upper()} FREE!!!",
                        "CLICK HERE CLICK HERE CLICK HERE",
                        "100% GUARANTEED!!! ACT NOW!!!",
                    )
                    * 8
                )
            elif style == 3:  # link farm
                body = (
                    "<ul>"
                    + "".join(
                        f'<li><a href="https://{rng.choice(SPAM_DOMAINS)}/{slugify(rng.choice(kw))}-{k}">'
                        f"{esc(rng.choice(kw))} {k}</a></li>"
                        for k in range(120)
                    )
                    + "</ul>"
                )
            else:  # comment spam under a short real-looking snippet
                body = "<p>Great article, thanks for sharing.</p>" + "".join(
                    f'<div class="comment"><b>{esc(kw[k % 3])}</b> says: <a href="https://{domain}/go?id={k}">'
                    f"{esc(kw[k % 3])} {esc(kw[(k + 1) % 3])}</a> {esc(kw[0])} {esc(kw[0])}</div>"
                    for k in range(50)
                )
            title = f"{kw[0].title()} - {kw[1].title()} - {kw[2].title()} - Best Price 2024"
            path = f"/{slugify(kw[rng.randrange(3)])}-{rng.randrange(1000, 99999)}.html"
            url = self.unique_url(f"https://{domain}{path}")
            page = (
                f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title>'
                f'<meta name="keywords" content="{esc(", ".join(kw * 10))}"></head><body>'
                f'<h1>{esc(title)}</h1>{body}<div class="footer">'
                + " ".join(f'<a href="/{slugify(k)}">{esc(k)}</a>' for k in kw * 10)
                + "</div></body></html>"
            )
            self.captures.append(
                self.html_capture(
                    "spam", url, page, note=("stuffing", "repeat", "caps", "linkfarm", "comments")[style]
                )
            )

    # ---- other languages

    def foreign(self) -> None:
        rng = self.rng
        seen: Counter[str] = Counter()
        for lang, encoding, header_cs, meta_cs, note in FOREIGN_PAGES:
            pool = texts.OTHER[lang]
            i = seen[lang]
            seen[lang] += 1
            # Rotate through the pool two paragraphs at a time so pages of one language overlap little.
            paras = [pool[(2 * i) % len(pool)], pool[(2 * i + 1) % len(pool)]]
            first = re.split(r"[,.:;，。、]", paras[0])[0]
            title = " ".join(first.split()[:8]) if lang not in ("zh", "ja") else first[:18]
            domain = rng.choice(FOREIGN_SITES[lang])
            ui = texts.UI[lang]
            published = datetime(2023, 6, 1, tzinfo=UTC) + timedelta(days=rng.randrange(260))
            main = f'<h1>{esc(title)}</h1><p class="meta">{published:%d.%m.%Y}</p>' + "".join(
                f"<p>{esc(p)}</p>" for p in paras
            )
            nav = [("/", str(ui["nav"][0]))] + [(f"/{slugify(str(t))}/", str(t)) for t in ui["nav"][1:]]
            foot = [
                (f"/{slugify(str(ui['privacy']))}/", str(ui["privacy"])),
                ("/impressum/", "Impressum"),
                ("/rss/", "RSS"),
            ]
            side = [(f"/{k}/", f"{ui['more']} {k}") for k in range(1, 6)]
            theme = "legacy" if note == "legacy" and i % 2 == 0 else ("blog", "news", "static")[i % 3]
            links = {"nav": nav, "sidebar": side, "footer": foot}
            page = self.page(theme, domain, lang, title, meta_cs, main, paras[0][:120], **links)
            path = (
                f"/{published:%Y/%m}/{slugify(title)}/"
                if lang not in ("zh", "ja", "ru")
                else f"/news/{published:%Y%m%d}/{rng.randrange(1000, 9999)}.html"
            )
            url = self.unique_url(f"https://{domain}{path}")
            self.captures.append(
                self.html_capture(
                    "other_language",
                    url,
                    page,
                    lang=lang,
                    encoding=encoding,
                    header_charset=header_cs,
                    note=note,
                )
            )

    # ---- non-HTML responses

    def non_html(self) -> None:
        domain = "www.example-gardening-blog.com"
        robots = (
            b"User-agent: *\nDisallow: /wp-admin/\nAllow: /wp-admin/admin-ajax.php\n\nSitemap: "
            b"https://www.example-gardening-blog.com/sitemap.xml\n"
        )
        plain = "Notes on winter pruning\n\n" + texts.ENGLISH[18][1] + "\n\n" + texts.ENGLISH[19][1] + "\n"
        pdf = make_pdf("Allotment rules and plot allocation 2024")
        css = b"body{font-family:Georgia,serif;margin:0}.site-header{background:#254d32;color:#fff}\n"
        json_body = (
            b'{"posts":[{"id":101,"title":"Pruning Roses Without Fear"},{"id":102,"title":"Compost"}]}'
        )
        rss = (
            '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>Gardening blog</title>'
            + "".join(
                f"<item><title>{esc(a.title)}</title><link>{esc(a.url)}</link></item>"
                for a in self.articles[:5]
            )
            + "</channel></rss>"
        ).encode()
        not_found = (
            b"<!DOCTYPE html><html><head><title>404 Not Found</title></head><body><h1>Not Found</h1>"
            b"<p>The requested URL was not found on this server.</p></body></html>"
        )
        moved = (
            b"<!DOCTYPE html><html><head><title>301 Moved Permanently</title></head><body>"
            b'<h1>Moved Permanently</h1><p>The document has moved <a href="https://www.example-gardening-'
            b'blog.com/2024/03/pruning-roses/">here</a>.</p></body></html>'
        )
        rows = (
            ("/robots.txt", robots, "text/plain", "text/plain", "200 OK", [], "robots"),
            ("/favicon.png", make_png(16, 16, self.rng), "image/png", "image/png", "200 OK", [], "png"),
            (
                "/wp-content/uploads/2024/02/roses.png",
                make_png(64, 48, self.rng),
                "image/png",
                "image/png",
                "200 OK",
                [],
                "png",
            ),
            (
                "/files/allotment-rules-2024.pdf",
                pdf,
                "application/pdf",
                "application/pdf",
                "200 OK",
                [],
                "pdf",
            ),
            (
                "/notes/winter-pruning.txt",
                plain.encode(),
                "text/plain; charset=utf-8",
                "text/plain",
                "200 OK",
                [],
                "text",
            ),
            ("/assets/css/main.css", css, "text/css", "text/css", "200 OK", [], "css"),
            (
                "/wp-json/wp/v2/posts?per_page=2",
                json_body,
                "application/json; charset=UTF-8",
                "application/json",
                "200 OK",
                [],
                "json",
            ),
            ("/feed/", rss, "application/rss+xml; charset=UTF-8", "application/rss+xml", "200 OK", [], "rss"),
            (
                "/2019/05/old-tomato-varieties/",
                not_found,
                "text/html; charset=iso-8859-1",
                "text/html",
                "404 Not Found",
                [],
                "404",
            ),
            (
                "/pruning-roses",
                moved,
                "text/html; charset=iso-8859-1",
                "text/html",
                "301 Moved Permanently",
                [("Location", "https://www.example-gardening-blog.com/2024/03/pruning-roses/")],
                "301",
            ),
        )
        for path, body, ctype, ptype, status, extra, note in rows:
            self.captures.append(
                Capture(
                    kind="non_html",
                    url=self.unique_url(f"https://{domain}{path}"),
                    body=body,
                    content_type=ctype,
                    status=status,
                    payload_type=ptype,
                    language=None,
                    charset=None,
                    headers=extra,
                    note=note,
                )
            )

    # ---- edge cases

    def edge_cases(self) -> None:
        rng = self.rng
        self.captures.append(
            Capture(
                kind="edge",
                url=self.unique_url("https://www.fieldnotes-science.com/empty"),
                body=b"",
                content_type="text/html; charset=UTF-8",
                note="empty",
            )
        )
        depth = 5000
        nested = (
            '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Nested layout test</title></head>'
            "<body>"
            + '<div class="wrap">' * depth
            + "<p>This sentence sits at the bottom of five thousand nested containers.</p>"
            + "</div>" * depth
            + "</body></html>"
        )
        self.captures.append(
            self.html_capture(
                "edge",
                self.unique_url("https://www.legacyrefactor-weekly.io/experiments/nested-divs"),
                nested,
                note="nested",
            )
        )
        js_only = (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Dashboard</title>'
            '<script src="/static/js/main.4f2a9c.js" defer></script></head><body>'
            '<noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div>'
            "<script>document.getElementById('root').innerHTML='<h1>Loading</h1>';"
            "fetch('/api/articles').then(r=>r.json()).then(render);</script></body></html>"
        )
        self.captures.append(
            self.html_capture(
                "edge", self.unique_url("https://app.tidycode-notes.dev/dashboard"), js_only, note="js_only"
            )
        )
        # A response whose payload the crawler cut off: HTTP Content-Length is the full size, the WARC
        # record holds only the first part and says so with WARC-Truncated.
        art = self.articles[rng.randrange(len(self.articles))]
        extended = self.retell(art, ": Extended Edition", art.url.rstrip("/") + "-extended", art.base[::-1])
        full = self.render_article("edge", extended, 1)
        cut = full.body[: len(full.body) * 3 // 5]
        cut = cut[: cut.rfind(b"<") + 4]  # stop inside a tag
        full.url = self.unique_url(full.url)
        full.http_length, full.body, full.note = len(full.body), cut, "truncated"
        full.warc_headers = {"WARC-Truncated": "length"}
        self.captures.append(full)

    def build(self) -> list[Capture]:
        self.good_articles()
        self.duplicates()
        self.boilerplate()
        self.spam()
        self.foreign()
        self.non_html()
        self.edge_cases()
        return self.captures


def make_png(width: int, height: int, rng: random.Random) -> bytes:
    """A small valid PNG (RGB gradient with noise), so magic-number sniffing sees a real image."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
        )

    rows = b"".join(
        b"\x00"
        + bytes(v for x in range(width) for v in (x * 255 // width, y * 255 // height, rng.randrange(256)))
        for y in range(height)
    )
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def make_pdf(title: str) -> bytes:
    """A minimal one-page PDF; enough for type sniffing and for a text extractor to refuse politely."""
    stream = f"BT /F1 18 Tf 72 720 Td ({title}) Tj ET".encode()
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


# ---------------------------------------------------------------------------------------------- writer


class SampleWriter:
    """Writes captures as CC-style record triples with ids and dates drawn from the seeded RNG."""

    def __init__(self, out: io.BufferedIOBase, rng: random.Random) -> None:
        self.writer = WARCWriter(out, gzip=True)
        self.out = out
        self.rng = rng
        self.now = CRAWL_START
        self.ips: dict[str, str] = {}
        self.warcinfo_id = ""
        self.payload_digests: dict[str, tuple[str, str, str]] = {}  # url -> (digest, date, record id)

    def new_id(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def tick(self) -> str:
        self.now += timedelta(seconds=self.rng.randint(1, 25), milliseconds=self.rng.randrange(1000))
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")

    def ip(self, host: str) -> str:
        nets = ("192.0.2", "198.51.100", "203.0.113")  # documentation ranges, never routable
        return self.ips.setdefault(host, f"{nets[len(self.ips) % 3]}.{len(self.ips) % 250 + 2}")

    def warcinfo(self) -> None:
        self.warcinfo_id = self.new_id()
        info = (
            "isPartOf: cc2model-sample-2024\r\npublisher: cc2model (synthetic sample, not Common Crawl "
            "data)\r\ndescription: Synthetic sample crawl written by scripts/sample/make_sample.py for "
            f"offline runs and tests (seed {SEED})\r\noperator: cc2model maintainers\r\nsoftware: "
            "scripts.sample.make_sample (warcio)\r\nrobots: classic\r\nformat: WARC File Format 1.0\r\n"
            "conformsTo: http://bibnum.bnf.fr/WARC/WARC_ISO_28500_version1_latestdraft.pdf\r\n"
        ).encode()
        rec = self.writer.create_warc_record(
            "",
            "warcinfo",
            payload=io.BytesIO(info),
            length=len(info),
            warc_content_type="application/warc-fields",
            warc_headers_dict={
                "WARC-Date": self.tick(),
                "WARC-Record-ID": self.warcinfo_id,
                "WARC-Filename": WARC_FILENAME,
            },
        )
        self.writer.write_record(rec)

    def request(self, url: str, date: str, host: str) -> tuple[object, str]:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        http = StatusAndHeaders(
            f"GET {path} HTTP/1.1",
            [
                ("User-Agent", USER_AGENT),
                ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
                ("Accept-Language", "en-US,en;q=0.5"),
                ("Accept-Encoding", "br,gzip"),
                ("Host", host),
                ("Connection", "Keep-Alive"),
            ],
            protocol="",
            is_http_request=True,
        )
        rid = self.new_id()
        rec = self.writer.create_warc_record(
            url,
            "request",
            payload=io.BytesIO(b""),
            length=0,
            http_headers=http,
            warc_headers_dict={
                "WARC-Date": date,
                "WARC-Record-ID": rid,
                "WARC-Warcinfo-ID": self.warcinfo_id,
                "WARC-IP-Address": self.ip(host),
            },
        )
        return rec, rid

    def response_record(self, cap: Capture, date: str, req_id: str) -> tuple[object, str]:
        host = urlsplit(cap.url).netloc
        headers = [("Date", format_datetime(self.now, usegmt=True)), ("Server", self.rng.choice(SERVERS))]
        if cap.content_type:
            headers.append(("Content-Type", cap.content_type))
        headers.append(
            ("Content-Length", str(cap.http_length if cap.http_length is not None else len(cap.body)))
        )
        headers += cap.headers
        http = StatusAndHeaders(cap.status, headers, protocol="HTTP/1.1")
        rid = self.new_id()
        warc = {
            "WARC-Date": date,
            "WARC-Record-ID": rid,
            "WARC-Warcinfo-ID": self.warcinfo_id,
            "WARC-Concurrent-To": req_id,
            "WARC-IP-Address": self.ip(host),
        }
        warc.update(cap.warc_headers)
        if cap.payload_type:
            warc["WARC-Identified-Payload-Type"] = cap.payload_type
        rec = self.writer.create_warc_record(
            cap.url,
            "response",
            payload=io.BytesIO(cap.body),
            length=len(cap.body),
            http_headers=http,
            warc_headers_dict=warc,
        )
        self.payload_digests.setdefault(cap.url, (sha1_b32(cap.body), date, rid))
        return rec, rid

    def metadata(self, cap: Capture, date: str, resp_id: str) -> None:
        fields = [("fetchTimeMs", str(self.rng.randint(40, 1800)))]
        if cap.charset:
            fields.append(("charset-detected", cap.charset.upper()))
        fields += [("sample-kind", cap.kind), ("sample-language", cap.language or "none")]
        if cap.note:
            fields.append(("sample-note", cap.note))
        body = "".join(f"{k}: {v}\r\n" for k, v in fields).encode()
        rec = self.writer.create_warc_record(
            cap.url,
            "metadata",
            payload=io.BytesIO(body),
            length=len(body),
            warc_content_type="application/warc-fields",
            warc_headers_dict={
                "WARC-Date": date,
                "WARC-Record-ID": self.new_id(),
                "WARC-Warcinfo-ID": self.warcinfo_id,
                "WARC-Concurrent-To": resp_id,
            },
        )
        self.writer.write_record(rec)

    def capture(self, cap: Capture) -> None:
        date = self.tick()
        host = urlsplit(cap.url).netloc
        req, req_id = self.request(cap.url, date, host)
        resp, resp_id = self.response_record(cap, date, req_id)
        self.writer.write_record(req)
        self.writer.write_record(resp)
        self.metadata(cap, date, resp_id)

    def revisit(self, url: str) -> None:
        """A later fetch of an already stored URL whose payload did not change (identical digest)."""
        digest, orig_date, orig_id = self.payload_digests[url]
        date = self.tick()
        host = urlsplit(url).netloc
        req, req_id = self.request(url, date, host)
        http = StatusAndHeaders(
            "200 OK",
            [("Date", format_datetime(self.now, usegmt=True)), ("Content-Type", "text/html; charset=UTF-8")],
            protocol="HTTP/1.1",
        )
        rec = self.writer.create_revisit_record(
            url,
            digest,
            url,
            orig_date,
            http_headers=http,
            warc_headers_dict={
                "WARC-Date": date,
                "WARC-Record-ID": self.new_id(),
                "WARC-Warcinfo-ID": self.warcinfo_id,
                "WARC-Concurrent-To": req_id,
                "WARC-Refers-To": orig_id,
                "WARC-IP-Address": self.ip(host),
            },
        )
        self.writer.write_record(req)
        self.writer.write_record(rec)

    def truncated_tail(self, cap: Capture) -> None:
        """Append a response whose gzip member is cut in half, as a download interrupted mid-file leaves.

        Only at the end of the file: a corrupt member in the middle makes warcio raise ArchiveLoadFailed
        and stop (and datatrove's reader, which gunzips the whole file first, raise zlib.error), so the
        records after it would be unreachable and the rest of the sample useless.
        """
        date = self.tick()
        host = urlsplit(cap.url).netloc
        req, req_id = self.request(cap.url, date, host)
        self.writer.write_record(req)
        resp, _ = self.response_record(cap, date, req_id)
        buf = io.BytesIO()
        WARCWriter(buf, gzip=True).write_record(resp)
        member = buf.getvalue()
        self.out.write(member[: len(member) // 2])


def build_sample(out: Path = DEFAULT_OUT, seed: int = SEED) -> Counter[str]:
    """Generate the sample WARC at ``out``; returns the number of captures of each kind."""
    builder = SampleBuilder(seed)
    captures = builder.build()
    rng = builder.rng
    order = list(captures)
    rng.shuffle(order)  # crawl order mixes sites and kinds, as in a real WARC
    # A good page fetched in the first quarter of the crawl is fetched again, unchanged, at three quarters.
    early = [c.url for c in order[: len(order) // 4] if c.kind == "good"]
    revisit_of, revisit_at = rng.choice(early), 3 * len(order) // 4
    tail_art = builder.articles[rng.randrange(len(builder.articles))]
    mailbag = builder.retell(
        tail_art,
        " (Reader Mailbag)",
        f"https://{urlsplit(tail_art.url).netloc}/mailbag/{slugify(tail_art.title)}/",
        tail_art.base[1:] + tail_art.base[:1],
    )
    tail = builder.render_article("broken_tail", mailbag, 0)
    tail.url = builder.unique_url(tail.url)
    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    w = SampleWriter(buf, rng)
    w.warcinfo()
    for i, cap in enumerate(order):
        w.capture(cap)
        if i == revisit_at:
            w.revisit(revisit_of)
    w.truncated_tail(tail)
    out.write_bytes(buf.getvalue())
    counts = Counter(c.kind for c in captures)
    counts["revisit"] = 1
    counts["broken_tail"] = 1
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the WARC")
    parser.add_argument("--seed", type=int, default=SEED, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = build_sample(args.out, args.seed)
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size:,} bytes): " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
