"""The `scalesweep` log format: our `:::SCALESWEEP {json}` records (docs/records.md), human lines
ignored; a log may hold several runs, each opened by its header record."""

from __future__ import annotations

import json

from scalesweep.contract import records
from scalesweep.contract.records import RECORD_PREFIX, RECORD_SCHEMA, STATUSES
from scalesweep.logs import invariants
from scalesweep.logs.failures import TRUNCATED_REASON, unfinished_summary
from scalesweep.logs.run import Draft, LogFormatError, ParsedRun, keep_valid, refused_summary, run_identity


def iter_records(lines, source="<string>"):
    """(line number, record) of every `:::SCALESWEEP` record among numbered lines, each checked
    as a record (JSON object with a kind, no duplicate key, schema 1); (line number, None) for a
    human line. LogFormatError names the line of a corrupt record."""
    for number, line in lines:
        position = line.find(RECORD_PREFIX)
        if position < 0:
            yield number, None
        else:
            yield number, _load_record(line[position + len(RECORD_PREFIX):], source, number)


def parse_scalesweep(lines, source, world_size) -> list[ParsedRun]:
    writers = invariants.writers_problem(line[: line.find(RECORD_PREFIX)] for _, line in lines
                                         if RECORD_PREFIX in line)
    if writers:
        raise LogFormatError(source, writers)
    drafts: list[Draft] = []
    prelude: list[tuple[int, str]] = []
    texts = dict(lines)
    for number, record in iter_records(lines, source):
        if record is None:
            (drafts[-1].lines if drafts else prelude).append((number, texts[number]))
            continue
        kind = record.pop("record")
        record.pop("schema")
        if kind == "header":
            drafts.append(Draft(header=record, lines=[] if drafts else prelude, header_line=number))
            continue
        if kind not in ("epoch", "summary"):
            continue  # a record kind added after schema 1's parser: not ours to judge
        if not drafts and not _died_before_header(kind, record):
            raise LogFormatError(source, f"{kind} record before any header record", number)
        if not drafts:
            drafts.append(Draft(header=run_identity(source), lines=prelude))
        _add_record(drafts[-1], kind, record, source, number)
    if not drafts:
        raise LogFormatError(source, "':::SCALESWEEP' records but no header record")
    overlap = invariants.overlapping_runs([(draft.header, draft.epochs) for draft in drafts])
    if overlap:
        first, second = (drafts[index] for index in overlap)
        message = (f"the runs of the header records on lines {first.header_line} and "
                   f"{second.header_line} ran at the same time (start_time "
                   f"{records.shown(first.header.get('start_time'))} and "
                   f"{records.shown(second.header.get('start_time'))}): one run printed by two "
                   "processes, or two jobs writing one log; one writer per log")
        raise LogFormatError(source, message, second.header_line)
    return [_finish_scalesweep(draft, source, world_size) for draft in drafts]


def _died_before_header(kind: str, record: dict) -> bool:
    """A failure summary with no header before it: the trainer died before it could say what it
    ran (reading its data, building its model); the harness still closes the log."""
    return kind == "summary" and record.get("status") in STATUSES and record.get("status") != "ok"


def _load_record(payload: str, source, number) -> dict:
    try:
        record = _RECORD_DECODER.decode(payload)
    except RecursionError:
        raise LogFormatError(source, f"corrupt {RECORD_PREFIX} record: nested too deeply", number) from None
    except ValueError as error:  # bad JSON, a duplicate key, an integer of over 4,300 digits
        raise LogFormatError(source, f"corrupt {RECORD_PREFIX} record: {error}", number) from None
    if not isinstance(record, dict) or not isinstance(record.get("record"), str):
        raise LogFormatError(
            source, f"{RECORD_PREFIX} record is not an object with a 'record' kind", number
        )
    brackets = payload.count("[") + payload.count("{")  # a bound on the depth, at C speed
    if brackets > records.MAX_DEPTH and records.depth(record) > records.MAX_DEPTH:
        message = f"{RECORD_PREFIX} record nested deeper than {records.MAX_DEPTH} levels"
        raise LogFormatError(source, message, number)
    schema = record.get("schema")
    if not records.is_integer(schema) or schema != RECORD_SCHEMA:
        message = f"record schema {records.shown(schema)}, this parser reads schema {RECORD_SCHEMA}"
        raise LogFormatError(source, message, number)
    return record


def _object_without_duplicate_keys(pairs) -> dict:
    # With a repeated key json keeps the last value: `"seconds": 8.0, "seconds": -5` would read as
    # a valid-looking -5 (or 8) depending on the order a writer happened to use.
    record = dict(pairs)
    if len(record) < len(pairs):
        seen = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"key {records.shown(repeated)} appears twice in one object")
    return record


_RECORD_DECODER = json.JSONDecoder(object_pairs_hook=_object_without_duplicate_keys)


def _add_record(draft: Draft, kind: str, record: dict, source, number) -> None:
    if draft.summary is not None:
        raise LogFormatError(source, f"{kind} record after the summary record", number)
    if kind == "summary":
        if record.get("status") not in STATUSES:
            status = records.shown(record.get("status"))
            message = f"summary status {status} is not one of {', '.join(STATUSES)}"
            raise LogFormatError(source, message, number)
        draft.summary = keep_valid(draft, "summary", record, f"{source}:{number}: summary record")
        return
    epoch = record.get("epoch")
    if not records.is_count(epoch):
        message = f"epoch record needs a 1-based integer 'epoch' (at most 2**53), got {records.shown(epoch)}"
        raise LogFormatError(source, message, number)
    if any(seen["epoch"] == epoch for seen in draft.epochs):
        raise LogFormatError(source, f"epoch {epoch} recorded twice in one run", number)
    draft.epochs.append(keep_valid(draft, "epoch", record, f"{source}:{number}: epoch {epoch} record"))


def _finish_scalesweep(draft: Draft, source, world_size) -> ParsedRun:
    if records.is_count(world_size):
        draft.header.setdefault("world_size", world_size)
    if _failed_by_trainer(draft):
        # The trainer's own verdict is the reason; a header with nothing to measure (0 images
        # per epoch: too few images for one step) is its symptom, not a broken log.
        found = records.problems("header", draft.header, required=bool(draft.header_line))
        draft.header = records.drop_bad_keys(draft.header, found)
    else:
        where = f"{source}:{draft.header_line}: header record"
        draft.header = keep_valid(draft, "header", draft.header, where)
    summary = draft.summary
    if draft.problems:
        summary = refused_summary(draft.problems, len(draft.epochs))
    elif summary is None:
        summary = unfinished_summary(draft.lines, len(draft.epochs), TRUNCATED_REASON)
    else:
        asked = draft.header.get("epochs")
        if summary["status"] == "ok" and isinstance(asked, int) and len(draft.epochs) < asked:
            reason = f"summary says ok but only {len(draft.epochs)} of {asked} epoch records were logged"
            summary = {**summary, "status": "failed", "reason": reason}
    return ParsedRun("scalesweep", source, draft.header, draft.epochs, summary, draft.problems)


def _failed_by_trainer(draft: Draft) -> bool:
    return draft.summary is not None and draft.summary["status"] != "ok"
