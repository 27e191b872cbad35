"""The notes environment: a notebook of titled notes that the agent edits with
four tools until it matches a generated goal.

- list_notes {}                        every note, sorted by title
- write_note {"title", "body"}         create a note or replace its body
- append_note {"title", "text"}        add text to the end of a note
- delete_note {"title"}                remove a note

A task is {"steps": N} (1..6): the seed decides the starting notebook and
N edits to carry out (the task generator lives here, so a Go starter only
has to draw N). The task statement lists the edits in words and once more
on a machine-readable line, TASK {"edits": [{"tool", "arguments"}, ...]},
for the scripted policy (envs/notes in the Go module). The verifier
compares the notebook with the goal note by note.

Export/restore: the whole state is plain JSON (the notebook, the goal, the
seed and step count); Export writes it deterministically and Restore
validates every part of it before it builds a session, so a restored
session answers every later tool call exactly like the original.
"""

import hashlib
import json

from turnstile.participant import EXPORT_RESTORE, EnvError, Environment, Session

NAME = "notes"
MAX_STEPS = 6
MAX_TITLE = 64
MAX_BODY = 2000
STATE_VERSION = 1

INSTRUCTIONS = ("You keep a notebook. Start with list_notes, then carry out the edits you are given, in order, "
                "with write_note, append_note and delete_note; answer done when they are all made.")

_TITLES = ["groceries", "todo", "ideas", "books", "travel", "recipes", "meeting", "garden", "gifts", "workout"]
_WORDS = ["milk", "eggs", "call Ana", "fix the bike", "read Dune", "book the train", "basil", "water the roses",
          "buy a scarf", "run 5 km", "agenda: budget", "try the curry", "pay rent", "new lamp", "yoga at 7"]

_TITLE = {"type": "string", "minLength": 1, "maxLength": MAX_TITLE, "description": "the note's title"}
TOOLS = [
    {"name": "list_notes", "description": "Show every note, sorted by title.",
     "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "write_note", "description": "Create a note, or replace the body of the note with this title.",
     "parameters": {"type": "object", "properties": {"title": _TITLE, "body": {"type": "string", "maxLength": MAX_BODY}},
                    "required": ["title", "body"], "additionalProperties": False}},
    {"name": "append_note", "description": "Add text to the end of an existing note (after a comma).",
     "parameters": {"type": "object", "properties": {"title": _TITLE, "text": {"type": "string", "minLength": 1, "maxLength": MAX_BODY}},
                    "required": ["title", "text"], "additionalProperties": False}},
    {"name": "delete_note", "description": "Remove an existing note.",
     "parameters": {"type": "object", "properties": {"title": _TITLE}, "required": ["title"], "additionalProperties": False}},
]


class Draws:
    """Deterministic draws from a seed: SHA-256 of (seed, salt, counter), so
    a task is the same on every Python and every machine."""

    def __init__(self, seed, salt):
        self.prefix = f"{NAME}:{seed}:{salt}:"
        self.n = 0

    def below(self, k):
        self.n += 1
        h = hashlib.sha256((self.prefix + str(self.n)).encode()).digest()
        return int.from_bytes(h[:8], "big") % k

    def pick(self, items):
        return items[self.below(len(items))]


def generate(seed, steps):
    """The starting notebook and the edits of task {"steps": steps}."""
    d = Draws(seed, steps)
    notes = {}
    for _ in range(2 + d.below(2)):
        notes[d.pick([t for t in _TITLES if t not in notes])] = d.pick(_WORDS)
    edits, draft = [], dict(notes)
    for _ in range(steps):
        kind = d.pick(["write", "append", "delete"] if len(draft) > 1 else ["write", "append"])
        if kind == "write":
            title = d.pick(_TITLES)
            args = {"title": title, "body": d.pick(_WORDS)}
            draft[title] = args["body"]
        elif kind == "append":
            title = d.pick(sorted(draft))
            args = {"title": title, "text": d.pick(_WORDS)}
            draft[title] = draft[title] + ", " + args["text"]
        else:
            title = d.pick(sorted(draft))
            args = {"title": title}
            del draft[title]
        edits.append({"tool": kind + "_note", "arguments": args})
    return notes, edits, draft


def describe(edit):
    a = edit["arguments"]
    if edit["tool"] == "write_note":
        return f'Write the note "{a["title"]}" with the text "{a["body"]}".'
    if edit["tool"] == "append_note":
        return f'Append "{a["text"]}" to the note "{a["title"]}".'
    return f'Delete the note "{a["title"]}".'


def parse_task(task):
    if not isinstance(task, dict) or set(task) != {"steps"}:
        raise EnvError("bad_task", 'task must be {"steps": N}')
    steps = task["steps"]
    if type(steps) is not int or not 1 <= steps <= MAX_STEPS:
        raise EnvError("bad_task", f"steps must be an integer from 1 to {MAX_STEPS}")
    return steps


class NotesEnv(Environment):
    name, mode, tools = NAME, EXPORT_RESTORE, TOOLS

    def start(self, seed, task):
        steps = parse_task(task)
        notes, edits, goal = generate(seed, steps)
        lines = [f"Your notebook holds {len(notes)} notes. Make these {len(edits)} edits, in order, then answer done:"]
        lines += [f"{i + 1}. {describe(e)}" for i, e in enumerate(edits)]
        lines.append("TASK " + json.dumps({"edits": edits}, separators=(",", ":"), sort_keys=True))
        sess = NotesSession({"version": STATE_VERSION, "seed": seed, "steps": steps, "notes": notes, "goal": goal, "edits": 0})
        return sess, {"instructions": INSTRUCTIONS, "observation": "\n".join(lines)}

    def restore(self, state):
        return NotesSession(check_state(state))


def check_state(state):
    """Validates an exported state completely (fail closed: a restore
    installs nothing when one session does not check)."""
    want = {"version", "seed", "steps", "notes", "goal", "edits"}
    if not isinstance(state, dict) or set(state) != want:
        raise EnvError("bad_state", f"state must hold exactly {sorted(want)}")
    if state["version"] != STATE_VERSION:
        raise EnvError("bad_state", f"state version {state['version']!r}, this environment reads {STATE_VERSION}")
    for k in ("seed", "steps", "edits"):
        if type(state[k]) is not int:
            raise EnvError("bad_state", f"{k} must be an integer")
    if not 1 <= state["steps"] <= MAX_STEPS or state["edits"] < 0:
        raise EnvError("bad_state", "steps or edits out of range")
    for k in ("notes", "goal"):
        book = state[k]
        if not isinstance(book, dict) or not all(_valid_note(t, b) for t, b in book.items()):
            raise EnvError("bad_state", f"{k} must map titles to note bodies")
    return {"version": STATE_VERSION, "seed": state["seed"], "steps": state["steps"],
            "notes": dict(state["notes"]), "goal": dict(state["goal"]), "edits": state["edits"]}


def _valid_note(title, body):
    return isinstance(title, str) and 0 < len(title) <= MAX_TITLE and isinstance(body, str) and len(body) <= MAX_BODY


def _args(args, names):
    if not isinstance(args, dict) or set(args) != set(names):
        raise EnvError("bad_arguments", f"arguments must be an object with exactly {', '.join(names) or 'no fields'}")
    for k in names:
        if not isinstance(args[k], str):
            raise EnvError("bad_arguments", f"{k} must be a string")
    if "title" in args and not 0 < len(args["title"]) <= MAX_TITLE:
        raise EnvError("bad_arguments", f"title must have 1 to {MAX_TITLE} characters")
    return args


class NotesSession(Session):
    """Each tool is a tool_<name> method (the library's Session.apply
    dispatches to it); a string it returns is the observation."""

    def __init__(self, state):
        self.s = state

    def tool_list_notes(self, args):
        _args(args, [])
        notes = self.s["notes"]
        if not notes:
            return "The notebook is empty."
        return f"{len(notes)} notes:\n" + "\n".join(f"- {t}: {notes[t]}" for t in sorted(notes))

    def tool_write_note(self, args):
        a = _args(args, ["title", "body"])
        if len(a["body"]) > MAX_BODY:
            raise EnvError("bad_arguments", f"body longer than {MAX_BODY} characters")
        self.s["notes"][a["title"]] = a["body"]
        self.s["edits"] += 1
        return f'Wrote "{a["title"]}". The notebook holds {len(self.s["notes"])} notes.'

    def tool_append_note(self, args):
        a = _args(args, ["title", "text"])
        notes = self.s["notes"]
        if a["title"] not in notes:
            raise EnvError("illegal_action", f'there is no note "{a["title"]}"')
        if not a["text"] or len(notes[a["title"]]) + 2 + len(a["text"]) > MAX_BODY:
            raise EnvError("bad_arguments", f"text must be non-empty and the note stay within {MAX_BODY} characters")
        notes[a["title"]] = notes[a["title"]] + ", " + a["text"]
        self.s["edits"] += 1
        return f'"{a["title"]}" now reads: {notes[a["title"]]}'

    def tool_delete_note(self, args):
        a = _args(args, ["title"])
        if a["title"] not in self.s["notes"]:
            raise EnvError("illegal_action", f'there is no note "{a["title"]}"')
        del self.s["notes"][a["title"]]
        self.s["edits"] += 1
        return f'Deleted "{a["title"]}". The notebook holds {len(self.s["notes"])} notes.'

    def verify(self):
        """Reward: the share of titles (of the goal and the notebook) whose
        note is exactly as the goal wants it (absent where it wants none)."""
        notes, goal = self.s["notes"], self.s["goal"]
        titles = sorted(set(notes) | set(goal))
        wrong = [t for t in titles if notes.get(t) != goal.get(t)]
        right = len(titles) - len(wrong)
        reward = right / len(titles) if titles else 1.0
        return {"reward": reward, "details": {"matching": right, "titles": len(titles), "wrong": wrong, "edits": self.s["edits"]}}

    def export(self):
        s = self.s
        return {"version": s["version"], "seed": s["seed"], "steps": s["steps"],
                "notes": {t: s["notes"][t] for t in sorted(s["notes"])},
                "goal": {t: s["goal"][t] for t in sorted(s["goal"])}, "edits": s["edits"]}
