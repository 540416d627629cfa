"""The report page: one static HTML file, inline CSS, no script, images by relative path.

Everything that comes from the crawl (document text, URLs, reasons) is HTML-escaped: a crawled page
may contain markup, and the report must show it, not run it.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

# the stylesheet lives beside this module as CSS; the page inlines it, so index.html stays one file offline
CSS = Path(__file__).with_name("report.css").read_text(encoding="utf-8")


def _n(value: int | float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def _cell(tag: str, content: str, numeric: bool) -> str:
    return f'<{tag} class="n">{content}</{tag}>' if numeric else f"<{tag}>{content}</{tag}>"


def _table(head: list[str], rows: list[list[str]], table_id: str = "", numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    th = "".join(_cell("th", escape(h), i in numeric) for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(_cell("td", c, i in numeric) for i, c in enumerate(r)) + "</tr>" for r in rows)
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(images: dict[str, str], name: str, alt: str, missing: str) -> str:
    if name not in images:
        return f'<p class="note">{escape(missing)}</p>'
    return f'<img src="{escape(images[name])}" alt="{escape(alt)}">'


def _steps_table(data: dict) -> str:
    rows = []
    for s in data["steps"]:
        share = f"{100 * s['kept'] / s['in']:.1f}%" if s["in"] else "–"
        reasons = ", ".join(f"{escape(k)}={v:,}" for k, v in s["reasons"].items())
        where = ", ".join(escape(d) for d in s["removed_paths"]) or "–"
        check = f'<span class="{"ok" if s["consistent"] else "bad"}">{_n(s["removed_rows"])}</span>'
        check = f"{check} in {where}" if s["removed_dirs"] or not s["consistent"] else "–"
        counts = [_n(s[key]) for key in ("in", "kept", "dropped")]
        rows.append([escape(s["stage"]), escape(s["step"]), *counts, share, _n(s["tokens_kept"]), reasons, check])
    head = ["stage", "step", "in", "kept", "dropped", "kept %", "tokens kept", "dropped by reason", "rows on disk"]
    table = _table(head, rows, "steps", {2, 3, 4, 5, 6})
    bad = [s for s in data["steps"] if not s["consistent"]]
    off = [f"{escape(s['step'])} ({_n(s['removed_rows'])} rows vs {_n(s['dropped'])} dropped)" for s in bad]
    if off:  # an exclusion writer that lost rows, or files of an unfinished task: the counts above still hold
        table += f'<p class="bad">removed/ files disagree with stats.json for: {", ".join(off)}</p>'
    return table


def _doc(doc: dict, kind: str) -> str:
    """One sampled document: reason, URL, language, length, its signals, and its (escaped) text."""
    rows = [[escape(k), _n(v)] for k, v in sorted(doc.get("signals", {}).items())]  # scan kept numbers only
    table = _table(["signal", "value"], rows, numeric={1})
    sig = f"<details><summary>signals ({len(rows)})</summary>{table}</details>" if rows else ""
    score = f" ({doc['language_score']:.2f})" if isinstance(doc.get("language_score"), float) else ""
    extra = f" · cluster of {doc['cluster_size']}" if (doc.get("cluster_size") or 0) > 1 else ""
    text = escape(doc["text"]) + (" […]" if doc.get("truncated") else "") if doc["text"] else "<i>(no text)</i>"
    extra += f" · before the refilter: {escape(doc['previously'])}" if doc.get("previously") else ""
    return (
        f'<div class="doc {kind}"><div class="head"><span class="reason">{escape(str(doc["reason"]))}</span> '
        f"{escape(doc.get('url') or '')} · {escape(str(doc.get('language') or '–'))}{score} · "
        f"{doc['words']:,} tokens{extra}</div>{sig}<pre>{text}</pre></div>"
    )


def _samples(data: dict) -> str:
    parts = []
    for group in data["samples"]:
        if not group["items"]:
            continue
        kind = "kept" if group["set"] == "kept" else "removed"
        head = f"{escape(group['label'])} <small>({group['docs']:,} documents, {len(group['items'])} sampled)</small>"
        parts += [f"<h3>{head}</h3>", *(_doc(doc, kind) for doc in group["items"])]
    return "".join(parts) or '<p class="note">no documents on disk</p>'


def _refilter(data: dict) -> str:
    """A refilter output against its run: what moved, by reason, and the first documents of each direction."""
    refiltered = data.get("refilter")
    if not refiltered:
        return ""
    rows = [
        [escape(c["from"]), escape(c["to"]), escape(c["reason"]), _n(c["documents"])] for c in refiltered["changes"]
    ]
    parts = [
        "<h2>Newly dropped / newly kept</h2>",
        f"<p id='refilter'>Against the run {escape(refiltered['of'])}: {_n(refiltered['newly_dropped'])} documents "
        f"newly dropped (the run kept them), {_n(refiltered['newly_kept'])} newly kept (the run removed them). "
        "The reason is the one that removes a document now, or removed it before.</p>",
        _table(["was in", "now in", "reason", "documents"], rows, "refilter-changes", {3}),
    ]
    for which, kind in (("dropped", "removed"), ("kept", "kept")):
        items = refiltered["samples"][which]
        parts.append(f"<h3>newly {which} <small>(first {len(items)})</small></h3>")
        parts += [_doc(doc, kind) for doc in items] or ['<p class="note">none</p>']
    return "".join(parts)


def _domains(data: dict) -> str:
    cols = []
    for key in ("kept", "removed"):
        rows = [[escape(d), _n(n)] for d, n in data["domains"][key]]
        cols.append(f"<div><h3>{key}</h3>{_table(['domain', 'documents'], rows, f'domains-{key}', {1})}</div>")
    return f'<div class="cols">{"".join(cols)}</div>'


def _header(data: dict) -> str:
    meta = data["meta"]
    command = " ".join(meta.get("command") or [])
    versions = ", ".join(f"{k} {v}" for k, v in (meta.get("versions") or {}).items())
    t = data["totals"]
    cards = [
        ("WARC records read", t["records"]),
        ("HTML documents", t["html_documents"]),
        (f"documents {t['kept_from']}", t["kept_documents"]),
        ("tokens kept", t["kept_tokens"]),
    ]
    card_html = "".join(f'<div class="card">{escape(k)}<b>{_n(v)}</b></div>' for k, v in cards)
    return (
        f"<h1>Run report: {escape(data['dump'])}</h1>"
        f'<p class="meta">source: {escape(str(meta.get("source")))} · recipe: {escape(str(data.get("recipe")))} · '
        f"started {escape(str(meta.get('started_at')))}<br>command: <code>{escape(command)}</code><br>"
        f"{escape(versions)}<br>Counts are from <code>stats.json</code>; {escape(data['token_note'])}.</p>"
        f'<div class="cards">{card_html}</div>'
    )


def render(data: dict, images: dict[str, str]) -> str:
    """The whole page for the report data and the plots drawn from it."""
    reader = [[escape(k), _n(v)] for k, v in data["reader"].items()]
    removals = [[escape(r["step"]), escape(r["reason"]), _n(r["count"])] for r in data["removals"]]
    stages = [[escape(k), _n(v["tasks_completed"]), _n(v["tasks_total"])] for k, v in data["stages"].items()]
    clusters = data.get("clusters")
    sections = [
        _header(data),
        _refilter(data),
        "<h2>Funnel</h2>",
        _img(images, "funnel", "funnel of documents and tokens", "no filtering steps"),
        _steps_table(data),
        "<h2>WARC reading</h2>",
        _table(["counter", "value"], reader, "reader", {1}),
        "<h2>Removals by rule</h2>",
        _img(images, "removals", "removals by rule", "nothing was removed"),
        _table(["step", "reason", "documents"], removals, "removals", {2}),
        "<h2>Languages</h2>",
        _img(images, "languages", "language distribution", "no language was identified"),
        "<h2>Document length</h2>",
        _img(images, "lengths", "document length histogram", ""),
        "<h2>Quality score</h2>",
        _img(images, "quality", "quality-score histogram", "no quality classifier ran in this run"),
        "<h2>Deduplication</h2>",
        _img(images, "clusters", "dedup cluster sizes", "no dedup stage in this run"),
        _table(["cluster size", "clusters"], [[k, _n(v)] for k, v in clusters["sizes"].items()], "clusters", {0, 1})
        if clusters
        else "",
        "<h2>Top domains</h2>",
        _img(images, "domains", "top domains kept and removed", "no URLs"),
        _domains(data),
        "<h2>Sampled documents</h2>",
        _samples(data),
        "<h2>Model evaluation</h2>",
        f"<p id='evaluation'>{escape((data.get('evaluation') or {}).get('summary', 'no model evaluated'))}</p>",
        f"<p id='fine-tuning'>{escape(data['fine_tuning']['summary'])}</p>" if data.get("fine_tuning") else "",
        "<h2>Tasks</h2>",
        _table(["stage", "tasks completed", "tasks total"], stages, "tasks", {1, 2}),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>Run report: {escape(data['dump'])}</title><style>{CSS}</style></head>"
        f"<body>{''.join(sections)}</body></html>\n"
    )
