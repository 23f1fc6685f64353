"""Prompt sets: a small built-in set written for this kit, and JSONL prompt files.

Evaluation prompts (chat, code, math; eight each) are what the oracle, the benchmark client and the notebooks send
by default. Training prompts (`kind="train"`, ~10,000, templated and deterministic; any prefix is balanced across
kinds) are disjoint from them, so acceptance measured on the evaluation set is held-out.

    builtin_prompts()            # 24 eval prompts: [{"id": "chat-01", "kind": "chat", "prompt": "..."}]
    builtin_prompts("code")      # one kind; builtin_prompts("train"): the training prompts
    load_prompts_jsonl("p.jsonl")  # lines {"prompt": "...", "id"?: ..., "kind"?: ...}

A JSONL line may use "text" or OpenAI-style "messages" (the last user message) instead, or, with `ids_ok=True`
(`kit launch --capture-hidden`), carry "input_ids" sent as they are. `python -m kit.prompts [KIND]` prints a set.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

from kit.findings import KitInputError

EVAL_KINDS = ("chat", "code", "math")

CHAT = [
    "What is speculative decoding?",
    "Give me three tips for sleeping better.",
    "Why is the sky blue? Answer in a short paragraph.",
    "Write a friendly email inviting a colleague to a team lunch on Friday.",
    "What are the main differences between a cat and a dog as pets?",
    "Summarize the plot of a typical hero's journey story.",
    "How do I make a cup of green tea properly?",
    "Explain what a neural network is to a ten-year-old.",
]
CODE = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Explain what a Python list comprehension is, with an example.",
    "Write a SQL query that counts the orders per customer in a table named orders.",
    "Write a JavaScript function that removes duplicates from an array.",
    "How do I read a CSV file with pandas and print its first five rows?",
    "Write a bash command that counts the lines in every .txt file of a directory.",
    "Write a Python class for a simple stack with push, pop and peek.",
]
MATH = [
    "What is 17 multiplied by 23? Show your steps.",
    "Solve for x: 3x + 7 = 22.",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
    "What is the area of a circle with radius 4 cm?",
    "If a shirt costs $40 and is discounted by 25%, what is the new price?",
    "What is the sum of the integers from 1 to 50?",
    "Convert 3/8 to a decimal and to a percentage.",
    "A rectangle has a perimeter of 30 m and a width of 5 m. What is its length?",
]

# training prompts: templates x subjects, disjoint from the evaluation prompts above
_CHAT_T = [
    "Explain {} in simple terms.",
    "What are the benefits of {}?",
    "Write a short paragraph about {}.",
    "Give me some advice about {}.",
    "What should a beginner know about {}?",
    "Describe the history of {} briefly.",
]
_CHAT_S = [
    "gardening",
    "learning a new language",
    "photography",
    "running",
    "saving money",
    "cooking pasta",
    "the solar system",
    "volcanoes",
    "public speaking",
    "time management",
    "climate change",
    "chess",
    "bicycles",
    "the ocean",
    "coffee",
    "meditation",
    "birds",
    "electric cars",
    "the internet",
    "music theory",
    "painting",
    "friendship",
    "recycling",
    "mountains",
    "rainforests",
    "honey bees",
    "the moon",
    "libraries",
    "trains",
    "writing poetry",
]
_CODE_T = [
    "Write a Python function that {}.",
    "Write a JavaScript function that {}.",
    "Explain how to write code that {}.",
    "Write a short C program that {}.",
]
_CODE_S = [
    "reverses a list",
    "finds the largest number in a list",
    "counts the vowels in a string",
    "sorts a list of words alphabetically",
    "checks whether a number is prime",
    "computes a factorial",
    "converts Celsius to Fahrenheit",
    "merges two sorted lists",
    "counts word frequencies in a text",
    "removes whitespace from a string",
    "computes the average of a list",
    "finds the second smallest element",
    "checks whether two strings are anagrams",
    "flattens a nested list",
    "returns the even numbers of a list",
    "computes the greatest common divisor of two numbers",
    "capitalizes every word in a sentence",
    "checks whether a year is a leap year",
    "generates the first ten square numbers",
    "sums the digits of an integer",
]
_MATH_T = [
    "What is {a} plus {b}?",
    "What is {a} times {b}? Explain the steps.",
    "What is {a} minus {b}?",
    "Solve for x: {b}x + {a} = {c}.",
    "A box holds {a} apples and another holds {b}. How many in total?",
    "What is {a} percent of {c}?",
]


def _math_train() -> list[str]:
    out = []
    for i, t in enumerate(_MATH_T):
        for j in range(12):
            a, b = 7 + 13 * j + i, 3 + 5 * j + 2 * i
            out.append(t.format(a=a, b=b, c=a + b * (j + 2) + 100))
    return out


# the large training set (after the first ~300 above): more templates x subjects per kind, for a
# draft trained on a GPU; never equal to an evaluation prompt (checked by `_normalized` identity)
_CHAT_T2 = [
    "Tell me about {}.",
    "What is the most interesting fact about {}?",
    "Write a short story about {}.",
    "Write a poem about {}.",
    "List five facts about {}.",
    "How does {} work?",
    "What are common mistakes people make with {}?",
    "Write the introduction of a blog post about {}.",
    "Why do people enjoy {}?",
    "What are the pros and cons of {}?",
    "Summarize what you know about {}.",
    "Explain {} to a five-year-old.",
    "Describe {} in three sentences.",
    "What questions should I ask an expert on {}?",
    "Write a tweet about {}.",
    "What is the future of {}?",
    "Write a short dialogue between two friends about {}.",
    "Can you recommend some books about {}?",
    "Answer briefly: why does {} matter?",
    "Give me a fun fact and a myth about {}.",
    "What vocabulary should I learn to talk about {}?",
    "Write a product description related to {}.",
    "Plan a one-day lesson about {} for high school students.",
    "What are three surprising things about {}?",
]
_CHAT_S2 = _CHAT_S + [
    "astronomy", "dinosaurs", "the human heart", "sleep", "yoga", "jazz", "ancient Rome", "ancient Egypt",
    "the printing press", "volcanic islands", "deserts", "glaciers", "earthquakes", "hurricanes", "rain",
    "snow", "autumn", "spring flowers", "houseplants", "composting", "baking bread", "making pizza",
    "knitting", "woodworking", "hiking", "camping", "swimming", "basketball", "football", "tennis",
    "the Olympic Games", "board games", "video games", "movies", "theater", "opera", "sculpture",
    "architecture", "bridges", "skyscrapers", "airplanes", "rockets", "satellites", "robots",
    "artificial intelligence", "smartphones", "computers", "programming", "databases", "cybersecurity",
    "solar power", "wind energy", "batteries", "water conservation", "forests", "coral reefs", "whales",
    "dolphins", "elephants", "penguins", "wolves", "cats", "dogs", "horses", "butterflies", "ants",
    "mushrooms", "vitamins", "healthy breakfasts", "drinking water", "exercise", "stress", "happiness",
    "kindness", "leadership", "teamwork", "job interviews", "starting a business", "budgeting",
    "investing", "renting an apartment", "moving to a new city", "travel", "Japan", "Italy", "Brazil",
    "Canada", "Kenya", "Iceland", "the Amazon river", "the Alps", "the Great Wall of China", "museums",
    "history", "philosophy", "democracy", "economics", "psychology", "biology", "chemistry", "physics",
    "geography", "mathematics", "statistics", "writing essays", "reading habits", "note taking",
    "studying for exams", "online learning", "remote work", "parenting", "pets", "gratitude", "journaling",
    "minimalism", "fashion", "tea", "chocolate", "cheese", "spices", "rice", "soup", "salads",
    "street food", "farmers markets", "city parks", "public transport", "road trips", "lighthouses",
    "castles", "pirates", "the Renaissance", "the Industrial Revolution", "electricity", "magnets",
    "light", "sound", "gravity", "black holes", "Mars", "the Sun", "comets", "the weather", "clouds",
]  # fmt: skip
_TASKS = [
    "organize my week", "fall asleep faster", "stay focused while studying", "learn to cook", "start running",
    "save for a vacation", "make new friends", "keep my desk tidy", "write a good resume", "prepare for a job interview",
    "learn to play the guitar", "grow tomatoes", "drink more water", "reduce screen time", "read more books",
    "speak more confidently", "plan a birthday party", "clean a kitchen quickly", "learn to draw", "wake up early",
    "take better photos with a phone", "keep a plant alive", "train a puppy", "pack for a trip", "stay motivated",
    "write a thank-you note", "choose a laptop", "learn touch typing", "start a garden", "cook rice",
]  # fmt: skip
_TASK_T = ["How do I {}?", "What is the best way to {}?", "Give me three tips to {}.", "Help me {}."]
_EMAIL_T = "Write a {} email to {} about {}."
_TONES = ["short", "polite", "friendly", "formal"]
_PEOPLE = [
    "my manager",
    "a new client",
    "my landlord",
    "a teacher",
    "my neighbor",
    "a friend",
    "the team",
    "a customer",
]
_EMAIL_S = [
    "a delayed project", "a meeting next week", "a broken heater", "a school trip", "a noisy party", "a birthday",
    "a new office policy", "a refund request", "a job offer", "a holiday schedule", "a thank-you gift", "an apology",
]  # fmt: skip
_LANGS = ["Python", "JavaScript", "C", "Java", "Rust", "Go", "C++", "TypeScript", "Ruby", "Kotlin"]
_CODE_T2 = [
    "Write a {lang} function that {task}.",
    "Show me {lang} code that {task}.",
    "How would you write a {lang} program that {task}?",
]
_CODE_S2 = _CODE_S + [
    "returns the maximum of three numbers", "counts the words in a sentence", "converts a string to uppercase",
    "checks whether a list is sorted", "rotates a list by k positions", "returns the last element of a list",
    "computes the power of a number", "converts kilometers to miles", "prints a multiplication table",
    "finds the index of an element in a list", "removes negative numbers from a list", "joins a list of strings with commas",
    "counts how many times a character appears in a string", "checks whether a string contains only digits",
    "computes the length of the longest word", "swaps two variables", "returns the absolute value of a number",
    "checks whether a number is even", "computes the sum of a list", "computes the product of a list",
    "finds the minimum and maximum of a list", "builds a dictionary from two lists", "inverts a dictionary",
    "reads a text file and prints it", "writes a list of lines to a file", "parses a date string",
    "validates an email address", "generates a random password", "computes compound interest",
    "converts binary to decimal", "converts decimal to binary", "implements binary search",
    "implements bubble sort", "implements insertion sort", "implements a queue", "transposes a matrix",
    "adds two matrices", "computes the dot product of two vectors", "counts the lines of a file",
    "finds common elements of two lists", "splits a list into chunks", "truncates a string to n characters",
    "checks whether parentheses are balanced", "computes the median of a list", "computes a running total",
    "finds prime numbers below n", "sorts a list of tuples by their second item", "groups words by their first letter",
    "capitalizes the first letter of a string", "replaces spaces with underscores",
]  # fmt: skip
_CONCEPTS = [
    "a closure", "recursion", "a hash map", "a linked list", "an iterator", "a generator", "a class", "an interface",
    "exception handling", "a lambda function", "a for loop", "a while loop", "pattern matching", "a string",
    "an array", "a tuple", "immutability", "a pointer", "garbage collection", "a module", "unit testing",
    "a thread", "async and await", "type inference", "a constructor", "inheritance", "polymorphism", "a struct",
]  # fmt: skip
_CONCEPT_T = ["Explain {concept} in {lang}, with an example.", "What is {concept} in {lang}?"]
_SQL_S = [
    "selects all users older than 30", "finds the five most expensive products", "counts employees per department",
    "joins customers and orders", "computes the average salary", "deletes rows with an empty email",
    "updates the price of a product", "finds duplicate email addresses", "lists orders placed in 2023",
    "sums the sales per month", "creates a table for books", "finds customers without orders",
]  # fmt: skip
_BASH_S = [
    "lists the largest files in a directory", "finds every .py file", "counts the words in a file",
    "renames every .jpeg file to .jpg", "shows the disk usage of a folder", "prints the last 20 lines of a log",
    "searches for a word in every file", "creates a backup archive of a folder", "deletes empty directories",
    "shows running processes sorted by memory",
]  # fmt: skip
_MATH_T2 = [
    "What is {a} multiplied by {b}? Show your steps.",
    "What is {a} divided by {b}?",
    "What is {a} plus {b} plus {c}?",
    "Solve for x: {a}x - {b} = {c}.",
    "Solve for y: {b}y + {a} = {c}.",
    "A train travels {c} km in {b} hours. What is its average speed?",
    "What is the area of a rectangle {a} m long and {b} m wide?",
    "What is the perimeter of a square with side {a} cm?",
    "What is the area of a circle with radius {b} cm?",
    "A shirt costs ${c} and is discounted by {p}%. What is the new price?",
    "What is {p}% of {c}?",
    "What is the sum of the integers from 1 to {c}?",
    "Convert {b}/{d} to a decimal.",
    "Tom has {a} marbles and gives {b} to a friend. How many does he have left?",
    "A class has {a} students and each needs {b} pencils. How many pencils are needed?",
    "What is the average of {a}, {b} and {c}?",
    "If {b} apples cost ${a}, how much do {c} apples cost?",
    "What is {a} squared?",
    "Is {c} a prime number? Explain.",
    "What is the least common multiple of {a} and {b}?",
    "What is the greatest common divisor of {a} and {c}?",
    "A recipe needs {b} eggs per cake. How many eggs for {a} cakes?",
    "How many minutes are in {b} hours and {a} minutes?",
    "Round {c}.{a} to the nearest whole number.",
]


def _normalized(text: str) -> str:
    """Lower case, letters and digits only: two prompts equal under this are the same prompt."""
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())


def _train_large() -> tuple[list[str], list[str], list[str]]:
    """(chat, code, math) training prompts beyond the first set, each list shuffled with a fixed seed."""
    rng = random.Random(23)
    chat = [t.format(s) for s in _CHAT_S2 for t in _CHAT_T2]
    chat += [t.format(s) for s in _TASKS for t in _TASK_T]
    chat += [_EMAIL_T.format(t, p, s) for t in _TONES for p in _PEOPLE for s in _EMAIL_S]
    code = [t.format(lang=lang, task=s) for s in _CODE_S2 for lang in _LANGS for t in _CODE_T2]
    code += [t.format(concept=c, lang=lang) for c in _CONCEPTS for lang in _LANGS for t in _CONCEPT_T]
    code += [f"Write a SQL query that {s}." for s in _SQL_S] + [f"Write a bash command that {s}." for s in _BASH_S]
    math = []
    for t in _MATH_T2:
        for _ in range(90):
            a, b = rng.randint(3, 99), rng.randint(2, 19)
            c, d = rng.randint(20, 500), rng.choice([4, 5, 8, 10, 16, 20, 25])
            math.append(t.format(a=a, b=b, c=c, d=d, p=rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 75])))
    for lst in (chat, code, math):
        rng.shuffle(lst)
    return chat, code, math


def _interleave(*lists: list[str]) -> list[str]:
    return [x for group in itertools.zip_longest(*lists) for x in group if x is not None]


def _rows(kind: str, texts: list[str]) -> list[dict]:
    return [{"id": f"{kind}-{i + 1:02d}", "kind": kind, "prompt": t} for i, t in enumerate(texts)]


def builtin_prompts(kind: str | None = None) -> list[dict]:
    """Built-in prompts of one kind ("chat", "code", "math", "train"), or all evaluation kinds."""
    table = {"chat": CHAT, "code": CODE, "math": MATH}
    if kind is None:
        return [r for k in EVAL_KINDS for r in _rows(k, table[k])]
    if kind in table:
        return _rows(kind, table[kind])
    if kind == "train":
        chat = [t.format(s) for s in _CHAT_S for t in _CHAT_T[:4]]
        chat += [t.format(s) for s in _CHAT_S[::3] for t in _CHAT_T[4:]]
        code = [t.format(s) for s in _CODE_S for t in _CODE_T]
        math = _math_train()
        # interleave kinds deterministically so any prefix of the list is a balanced subset
        mixed = _interleave(chat, code, math) + _interleave(*_train_large())
        held_out = {_normalized(r["prompt"]) for r in builtin_prompts()}
        seen, out = set(held_out), []
        for t in mixed:  # first occurrence only, and never an evaluation prompt
            if _normalized(t) not in seen:
                seen.add(_normalized(t))
                out.append(t)
        return _rows("train", out)
    raise KitInputError(f"unknown prompt kind {kind!r}; choose from {', '.join(EVAL_KINDS + ('train',))}")


def interleave_kinds(rows: list[dict]) -> list[dict]:
    """Round-robin over the rows' kinds, so the first N of a mixed set hold chat, code and math alike."""
    by: dict = {}
    for r in rows:
        by.setdefault(r.get("kind"), []).append(r)
    return [x for grp in zip(*by.values()) for x in grp]


def load_prompts_jsonl(path, ids_ok: bool = False) -> list[dict]:
    """Read a JSONL prompt file; a bad line raises KitInputError naming file and line. With `ids_ok`, a line may carry
    "input_ids" (a non-empty list of non-negative ints) instead of text (its row's "prompt" None unless it has one)."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise KitInputError(f"{p}: cannot read ({e.strerror})")
    except UnicodeDecodeError:
        raise KitInputError(f"{p}: not a UTF-8 text file")
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise KitInputError(f"{p}:{n}: invalid JSON ({e.msg})")
        if not isinstance(obj, dict):
            raise KitInputError(f'{p}:{n}: expected a JSON object with a "prompt" field')
        text = obj.get("prompt", obj.get("text"))
        if text is None and isinstance(obj.get("messages"), list):
            users = [m.get("content") for m in obj["messages"] if isinstance(m, dict) and m.get("role") == "user"]
            text = users[-1] if users else None
        row = {"id": str(obj.get("id", f"line-{n}")), "kind": str(obj.get("kind", "custom")), "prompt": text}
        if "input_ids" in obj:
            ids = obj["input_ids"]
            if not ids_ok:
                raise KitInputError(f'{p}:{n}: "input_ids" rows are read by `kit launch --capture-hidden` only; '
                                    'this command needs a "prompt" (or "text"/"messages") string')  # fmt: skip
            if not (isinstance(ids, list) and ids and all(type(t) is int and t >= 0 for t in ids)):
                raise KitInputError(f'{p}:{n}: "input_ids" must be a non-empty list of non-negative integers')
            row["input_ids"] = ids
            row["prompt"] = text if isinstance(text, str) else None
        elif not isinstance(text, str) or not text.strip():
            raise KitInputError(f'{p}:{n}: no non-empty "prompt" (or "text"/"messages") string')
        out.append(row)
    if not out:
        raise KitInputError(f"{p}: no prompts")
    return out


if __name__ == "__main__":
    import sys

    rows = builtin_prompts(sys.argv[1] if len(sys.argv) > 1 else None)
    for r in rows:
        print(f"{r['id']:10} {r['prompt']}")
    print(len(rows), "prompts")
