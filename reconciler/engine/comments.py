"""One comment per pull request and subject, updated in place (Atlantis-style).

The comment starts with a hidden marker (``<!-- ... -->``); a later run finds the comment
carrying it and edits that one, so a pull request holds one current answer, never a pile.
"""

from __future__ import annotations

from reconciler.engine.ports import CommentThread


def fit(body: str, limit: int) -> str:
    """``body`` cut to the forge's limit, saying so."""
    if len(body) <= limit:
        return body
    note = "\n\n… cut to fit the forge's comment limit; run the command for the whole answer.\n"
    return body[: limit - len(note)] + note


def upsert_comment(forge: CommentThread, number: int, marker: str, body: str) -> str:
    """Update the comment of pull request ``number`` that holds ``marker``, or create it.
    Returns ``created``, ``updated`` or ``unchanged``."""
    text = fit(body if marker in body else f"{marker}\n{body}", forge.body_limit)
    for existing in forge.comments(number):
        if marker in existing.body:
            if existing.body.strip() == text.strip():
                return "unchanged"
            forge.update_comment(number, existing.id, text)
            return "updated"
    forge.comment(number, text)
    return "created"
