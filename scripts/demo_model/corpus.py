"""Synthetic chat corpus for the LlamaDesk demo model (pure Python, no torch).

Everything is generated from templates with a seeded ``random.Random``.  Held-out material
(question phrasings, arithmetic pairs, list combinations, names) is selected by a stable hash
or an explicit list, so those parts of the evaluation set never appear literally in the
training corpus (the copy dialogues' long random lists are not filtered; none of the six
evaluation lists occurs in them for seed 0).  The fallback and "What is my name?" questions
are in-distribution checks: they are drawn from the training templates.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

BOS = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [BOS, IM_START, IM_END]  # ids 0, 1, 2

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

Message = dict[str, str]


def render(messages: list[Message], add_generation_prompt: bool = False) -> str:
    """Python equivalent of CHAT_TEMPLATE."""
    out = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    if add_generation_prompt:
        out += f"{IM_START}assistant\n"
    return out


def _h(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def is_held_out_text(text: str) -> bool:
    """About 1 in 8 question phrasings is reserved for evaluation."""
    return _h("q:" + text) % 8 == 0


def is_held_out_pair(a: int, op: str, b: int) -> bool:
    """About 1 in 10 arithmetic problems is reserved for evaluation."""
    return _h(f"arith:{a}{op}{b}") % 10 == 0


def is_held_out_list(items: list[str]) -> bool:
    return _h("list:" + ",".join(items)) % 8 == 0


# ---------------------------------------------------------------------------------------------
# Answers and phrasings
# ---------------------------------------------------------------------------------------------

FALLBACK = (
    "Sorry, I am only a tiny demo model. I can answer questions about LlamaDesk, "
    "add and subtract two-digit numbers, remember your name and repeat short lists."
)
NO_NAME = "You have not told me your name yet."
MULTIPLY = "Sorry, I can only add and subtract two-digit numbers."

# intent -> (answer, core phrasings)
APP_INTENTS: dict[str, tuple[str, list[str]]] = {
    "open_tab": (
        "Press Ctrl+T to open a new tab.",
        [
            "How do I open a new tab?",
            "How can I open a tab?",
            "How do I start a new chat tab?",
            "What is the shortcut for a new tab?",
            "How to open a new tab?",
            "Which keys open a new tab?",
            "I want to open another tab. How?",
            "How do I create a new tab?",
            "What's the keyboard shortcut to open a tab?",
            "How can I start a new conversation in a new tab?",
        ],
    ),
    "close_tab": (
        "Press Ctrl+W to close the current tab.",
        [
            "How do I close a tab?",
            "How can I close this tab?",
            "What is the shortcut to close a tab?",
            "How to close the current tab?",
            "Which keys close a tab?",
            "How do I get rid of a tab?",
            "What's the keyboard shortcut for closing a tab?",
            "How can I close the tab I am in?",
        ],
    ),
    "fork": (
        'Click the "Fork from here" button on a message to fork the conversation from that point.',
        [
            "How do I fork a conversation?",
            "How can I branch a chat?",
            "How do I fork a chat from a message?",
            "How can I try a different path from an earlier message?",
            "How do I make a branch of this conversation?",
            "Can I fork a conversation?",
            "How to fork a conversation?",
            "How do I continue a chat from an earlier message in a new branch?",
        ],
    ),
    "stop": (
        "Press Esc or click the Stop button to stop the generation.",
        [
            "How do I stop the model?",
            "How can I stop generation?",
            "How do I stop the answer?",
            "The model keeps talking. How do I stop it?",
            "How to stop generating?",
            "How can I interrupt the reply?",
            "What stops the generation?",
            "How do I cancel a response?",
        ],
    ),
    "threads": (
        "Open Settings (Ctrl+,) and change the number of threads. Thread changes apply live.",
        [
            "How do I change the number of threads?",
            "How can I set the thread count?",
            "How do I use more CPU threads?",
            "Where do I change threads?",
            "How to change threads?",
            "Can I change the threads without restarting?",
            "How do I make it use fewer threads?",
            "How do I set how many threads are used?",
        ],
    ),
    "add_model": (
        "Open the Model manager and add a GGUF file or a folder with GGUF files.",
        [
            "How do I add a model?",
            "How can I load another model?",
            "How do I add a GGUF file?",
            "How to add a new model?",
            "Where do I add my own models?",
            "How can I use a different GGUF model?",
            "How do I add a folder of models?",
            "How do I install a new model?",
        ],
    ),
    "search": (
        "Press Ctrl+F to search your chats.",
        [
            "How do I search my chats?",
            "How can I find an old conversation?",
            "How do I search conversations?",
            "What is the shortcut for search?",
            "How to search chats?",
            "How can I look for a message in my chats?",
            "Is there a way to search my chat history?",
            "How do I find a chat?",
        ],
    ),
    "settings_effect": (
        "Changing settings other than threads rebuilds the context. Your tabs are kept.",
        [
            "What happens when I change settings?",
            "Will I lose my tabs if I change settings?",
            "Does changing the context size close my tabs?",
            "What happens to my chats when I change the settings?",
            "Do settings changes restart everything?",
            "What does changing a setting do?",
            "Are my tabs kept when I change a setting?",
        ],
    ),
    "data_location": (
        "LlamaDesk keeps its data in the data folder. Set LLAMADESK_HOME to use another folder.",
        [
            "Where is my data stored?",
            "Where does LlamaDesk keep my chats?",
            "Where are my conversations saved?",
            "How do I change the data folder?",
            "Where are the files kept?",
            "Can I move the data folder?",
            "Where does the app store its data?",
            "Where is the data folder?",
        ],
    ),
    "open_settings": (
        "Press Ctrl+, to open Settings.",
        [
            "How do I open the settings?",
            "Where are the settings?",
            "What is the shortcut for settings?",
            "How to open preferences?",
            "How can I get to the settings?",
            "How do I open Settings?",
        ],
    ),
    "about": (
        "LlamaDesk is a desktop app for chatting with local GGUF models through llama.cpp.",
        [
            "What is LlamaDesk?",
            "What does LlamaDesk do?",
            "Tell me about LlamaDesk.",
            "What is this app?",
            "What kind of app is LlamaDesk?",
            "What is this program for?",
        ],
    ),
}

TALK_INTENTS: dict[str, tuple[str, list[str]]] = {
    "greet": (
        "Hello! How can I help you today?",
        [
            "Hello",
            "Hi",
            "Hey",
            "Hi there",
            "Good morning",
            "Good evening",
            "Hey there",
            "Greetings",
            "Hello there",
            "Good afternoon",
            "Howdy",
            "Hiya",
        ],
    ),
    "how_are_you": (
        "I am fine, thank you! How can I help you?",
        [
            "How are you?",
            "How are you doing?",
            "How's it going?",
            "Are you well?",
            "How do you feel today?",
            "What's up?",
            "How are things?",
            "Are you doing okay?",
        ],
    ),
    "thanks": (
        "You're welcome!",
        [
            "Thanks",
            "Thank you",
            "Thanks a lot",
            "Thank you very much",
            "Great, thanks",
            "Cheers",
            "Many thanks",
            "Thanks for the help",
        ],
    ),
    "bye": (
        "Goodbye! Have a nice day.",
        [
            "Bye",
            "Goodbye",
            "See you later",
            "See you",
            "Bye bye",
            "I have to go now",
            "Talk to you later",
            "That's all for now, bye",
        ],
    ),
    "who": (
        "I am the LlamaDesk demo model, a small model that runs on your computer.",
        [
            "Who are you?",
            "What are you?",
            "What is your name?",
            "What's your name?",
            "Are you a robot?",
            "Which model are you?",
            "Tell me about yourself.",
            "Introduce yourself.",
        ],
    ),
    "capabilities": (
        "I can answer questions about LlamaDesk, add and subtract two-digit numbers, "
        "remember your name and repeat short lists.",
        [
            "What can you do?",
            "How can you help me?",
            "What are you able to do?",
            "What do you know?",
            "Help",
            "What can I ask you?",
            "What are you good at?",
        ],
    ),
}

QUESTION_PREFIXES = [
    "",
    "",
    "",
    "",
    "Hi! ",
    "Hello, ",
    "Hey, ",
    "Quick question: ",
    "Excuse me, ",
    "Please tell me: ",
    "I have a question. ",
    "Sorry, ",
    "Can you help? ",
    "Um, ",
    "OK. ",
    "Hi there. ",
]
QUESTION_SUFFIXES = ["", "", "", "", " Thanks!", " Thank you.", " Please.", " :)"]
TALK_PUNCT = ["", "!", ".", "!!", "?"]

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are the LlamaDesk demo model.",
    "Answer briefly.",
    "You are a friendly assistant running locally.",
    "You are a helpful, concise assistant.",
]

ARITH_TEMPLATES: dict[str, list[str]] = {
    "+": [
        "What is {a} + {b}?",
        "What is {a} plus {b}?",
        "What's {a} + {b}?",
        "Calculate {a} + {b}.",
        "Compute {a}+{b}",
        "{a} + {b} = ?",
        "{a} + {b}",
        "{a}+{b}=?",
        "How much is {a} + {b}?",
        "Add {a} and {b}.",
        "What do you get if you add {a} and {b}?",
        "Can you calculate {a} + {b}?",
        "Please compute {a} plus {b}.",
        "what is {a}+{b}",
    ],
    "-": [
        "What is {a} - {b}?",
        "What is {a} minus {b}?",
        "What's {a} - {b}?",
        "Calculate {a} - {b}.",
        "Compute {a}-{b}",
        "{a} - {b} = ?",
        "{a} - {b}",
        "{a}-{b}=?",
        "How much is {a} - {b}?",
        "Subtract {b} from {a}.",
        "What do you get if you subtract {b} from {a}?",
        "Can you calculate {a} - {b}?",
        "Please compute {a} minus {b}.",
        "what is {a}-{b}",
    ],
}
MULTIPLY_TEMPLATES = [
    "What is {a} * {b}?",
    "What is {a} times {b}?",
    "Multiply {a} by {b}.",
    "What is {a} divided by {b}?",
    "What is {a} / {b}?",
    "{a} x {b} = ?",
]

REPEAT_TEMPLATES = [
    "Repeat after me: {L}",
    "Repeat after me: {L}.",
    "Please repeat: {L}",
    "Say this back to me: {L}",
    "Can you repeat this list: {L}",
    "Repeat: {L}",
    "Repeat this: {L}",
    "Please say after me: {L}",
]

LIST_WORDS = (
    "apple pear plum cherry banana orange lemon lime grape melon peach mango kiwi fig date "
    "apricot berry coconut papaya olive tomato carrot potato onion garlic pepper bean pea corn "
    "rice bread cheese butter milk honey sugar salt tea coffee water juice soup cake cookie pie "
    "dog cat horse cow pig sheep goat duck goose chicken mouse rat rabbit fox wolf bear deer lion "
    "tiger zebra monkey snake frog fish shark whale owl eagle crow swan bee ant spider "
    "red blue green yellow purple pink black white brown gray silver gold "
    "table chair bed lamp door window wall floor roof house car bus train plane boat bike "
    "road bridge river lake sea ocean hill mountain forest tree flower grass leaf rock sand "
    "sun moon star cloud rain snow wind storm fire ice stone paper pen pencil book letter "
    "phone clock watch key lock box bag cup plate bowl spoon fork knife glass bottle "
    "shirt hat shoe sock coat dress ring bell drum piano guitar violin flute song dance "
    "north south east west spring summer autumn winter monday friday morning evening night "
    "one two three four five six seven eight nine ten red-green blue-gray "
    "London Paris Berlin Rome Madrid Oslo Tokyo Lima Cairo Delhi"
).split()

OOD_TEMPLATES = [
    "What is the capital of {place}?",
    "Who wrote {book}?",
    "Can you write a poem about {thing}?",
    "What is the weather like today?",
    "Translate {thing} into French.",
    "Tell me a joke.",
    "What is the meaning of life?",
    "Who won the last world cup?",
    "Write a story about a {thing}.",
    "How do I cook {thing}?",
    "What time is it?",
    "Explain quantum physics.",
    "How far away is the {sky}?",
    "What is the population of {place}?",
    "Can you browse the internet?",
    "Write some Python code for me.",
    "What is {a} to the power of {b}?",
    "What is the square root of {a}?",
]
OOD_PLACES = [
    "France",
    "Peru",
    "Japan",
    "Kenya",
    "Canada",
    "Norway",
    "Chile",
    "Egypt",
    "India",
    "Spain",
    "Brazil",
    "Germany",
    "Vietnam",
    "Poland",
]
OOD_BOOKS = ["Hamlet", "Don Quixote", "War and Peace", "Moby Dick", "Faust", "Dracula"]
OOD_SKY = ["moon", "sun", "nearest star", "planet Mars"]

NAME_INTROS = [
    "My name is {N}.",
    "My name is {N}",
    "My name's {N}.",
    "I'm {N}.",
    "I am {N}.",
    "Call me {N}.",
    "Hi, I'm {N}.",
    "Hello, my name is {N}.",
    "Hi! My name is {N}.",
    "You can call me {N}.",
    "{N} here.",
    "Hey, it's {N}.",
    "Hello! I am {N}.",
    "my name is {N}",
]
NAME_REPLY = "Nice to meet you, {N}! How can I help you?"
NAME_QUESTIONS = [
    "What is my name?",
    "What's my name?",
    "Do you remember my name?",
    "Who am I?",
    "Can you tell me my name?",
    "Do you know my name?",
    "Remind me, what is my name?",
    "what is my name",
    "What is my name again?",
    "Tell me my name.",
]
NAME_ANSWER = "Your name is {N}."

TRAIN_NAMES = (
    "Anna Ben Carla David Emma Felix Greta Hugo Iris Jonas Klara Lukas Mia Noah Olga Paul Rosa "
    "Sam Tina Uwe Vera Walter Xenia Yara Zoe Ada Bob Cleo Dan Eve Finn Gus Hans Ivy Jack Kai Leo "
    "Max Nina Otto Pia Rex Sara Tom Ulla Vic Wes Yuki Zack Alexander Benedikt Charlotte "
    "Dominika Elisabeth Frederick Gabriella Henrietta Isabella Jacqueline Konstantin "
    "Leonardo Margarethe Nathaniel Octavia Penelope Quirinus Rosalind Sebastian Theodora "
    "Valentina Wilhelmina Maximilian Anastasia Christopher Alessandra Aiko Bilal Chen Dmitri "
    "Esra Farid Giorgos Hiroshi Ines Jamal Kofi Lakshmi Mehmet Nadia Obi Priya Qiang Ravi Sanjay "
    "Tariq Umar Vikram Wei Ximena Yusuke Zainab Aroha Bjorn Camila Darius Elif Fatima Gunnar "
    "Hamid Ingeborg Joao Kasia Laszlo Mateo Nikolai Oona Pedro Ragnar Sione Tomasz Uri Vaclav "
    "Wojciech Yasmin Zoltan Aleksandra Brigitte Cosima Dagny Evangeline Florentyna Gwendolyn "
    "Hildegard Isidora Jorunn Kunigunde Liesbeth Magdalena Nepomuk Ottilie Philippa Radegund "
    "Sigismund Thorvald Ulrike Volker Winifred Yvette Zacharias Al Bo Cy Ed Jo Lu Ty Vi "
    "Mary-Jane Jean-Luc Anne-Marie O'Neil D'Arcy McKenzie MacLeod DeShawn LaToya VanDyke "
    "José María Zoë Björn Chloé André Jürgen Søren Łukasz Renée François Mónica Dvořák "
    "Siobhan Niamh Eilidh Tadhg Ciaran Aoife Dervla Fionnuala Gráinne Caoimhe"
).split()

# Never used in training: evaluation of recall with unseen names.
HELD_OUT_NAMES = (
    "Ilse Bartholomew Xiomara Oluwaseun Thibault Saoirse Kwame Zbigniew Anouk Leopoldine Ngozi "
    "Yusuf Marisol Eero Radomir Tova Quentin Ingrid Ludmila Fergus Ottoline Amadeus Solveig "
    "Kazimierz Perpetua Dorian Wiebke Ezekiel Henrik Agnès Rutger Clementine Imogen Barnaby "
    "Faustina Lorcan Mireille Ignatius Hortense Svetlana"
).split()

_ONSETS = [
    "b",
    "br",
    "c",
    "ch",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "j",
    "k",
    "kh",
    "l",
    "m",
    "n",
    "p",
    "ph",
    "qu",
    "r",
    "s",
    "sh",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "w",
    "y",
    "z",
    "zh",
    "",
    "",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou", "ia", "y", "ee", "oo", "ä", "é", "ø"]
_CODAS = ["", "", "", "n", "r", "l", "s", "th", "m", "k", "x", "nd", "rt", "ck", "ll", "tt"]


def _syllables(rng: random.Random, n: int) -> str:
    parts = []
    for i in range(n):
        vowel = rng.choice(_VOWELS[:12]) if rng.random() < 0.92 else rng.choice(_VOWELS)
        coda = rng.choice(_CODAS) if i == n - 1 or rng.random() < 0.3 else ""
        parts.append(rng.choice(_ONSETS) + vowel + coda)
    return "".join(parts)


_HELD_OUT_LOWER = {n.lower() for n in HELD_OUT_NAMES}


_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_RARE_LETTERS = "áàâäãåçéèêëíìîïñóòôöõøúùûüýÿšžčřłß"


def letter_string(rng: random.Random, lo: int = 2, hi: int = 10) -> str:
    """Letters in no pattern at all: copying them back needs a copy that keeps the order."""
    n = rng.randint(lo, hi)
    return "".join(
        rng.choice(_RARE_LETTERS) if rng.random() < 0.03 else rng.choice(_LETTERS) for _ in range(n)
    )


def _is_held_out_name(name: str) -> bool:
    parts = [name, *name.replace("-", " ").split()]
    return any(part.lower() in _HELD_OUT_LOWER for part in parts)


def name_pieces(vocab: Iterable[str]) -> tuple[str, ...]:
    """The letter pieces of a byte-level BPE vocabulary ("ine", "tin", "ier"; "Ġthi" -> "thi").

    A name the model never saw is copied piece by piece, and a piece it never copied in
    training ("tin" in "Quentin") is where the copy breaks; names glued from these pieces give
    (nearly) every piece of the vocabulary its turn to be copied -- not quite all, since BPE
    merges again across the glued boundaries.
    """
    found = set()
    for token in vocab:
        word = token[1:] if token.startswith("Ġ") else token
        if len(word) >= 2 and word.isascii() and word.isalpha():
            found.add(word.lower())
    return tuple(sorted(found))


def random_name(rng: random.Random, pieces: Sequence[str] = ()) -> str:
    """A training name: a listed one, a pronounceable generated one, random letters, or (given
    the tokenizer's ``pieces``) a few of them glued together.

    The listed names give the model real spellings; the others make sure it learns to *copy*
    a name it has never seen (token by token, in order) rather than to recall names it
    memorised.
    """
    while True:
        # without pieces: the first three kinds, in the same proportions to each other
        r = rng.random() * (1.0 if pieces else 0.5)
        if r < 0.08:  # few: a listed name is learnt by heart, which competes with copying
            name = rng.choice(TRAIN_NAMES)
        elif r < 0.33:
            name = _syllables(rng, rng.choice([1, 2, 2, 2, 3, 3, 4])).capitalize()
        elif r < 0.5:
            name = letter_string(rng, 2, 11).capitalize()
        else:
            n = rng.choice([1, 2, 2, 3, 3, 3, 4])
            name = "".join(rng.choice(pieces) for _ in range(n)).capitalize()
            if len(name) > 14:
                continue
        if len(name) < 2:
            continue
        if r >= 0.08:
            if rng.random() < 0.05:
                name += "-" + _syllables(rng, rng.choice([1, 2])).capitalize()
            elif rng.random() < 0.04:
                name += " " + _syllables(rng, rng.choice([1, 2, 3])).capitalize()
        if not _is_held_out_name(name):
            return name


def _random_word(rng: random.Random, common_only: bool = False) -> str:
    if common_only or rng.random() < 0.88:
        return rng.choice(LIST_WORDS)
    return _syllables(rng, rng.choice([1, 2, 2, 3]))


# ---------------------------------------------------------------------------------------------
# Turn generators (each returns (user, assistant))
# ---------------------------------------------------------------------------------------------


def _case(rng: random.Random, text: str) -> str:
    r = rng.random()
    if r < 0.08:
        text = text.lower()
    elif r < 0.16 and text[:2].istitle() and not text.startswith("LlamaDesk"):
        text = text[0].lower() + text[1:]
    if rng.random() < 0.12 and text.endswith(("?", ".", "!")):
        text = text[:-1]
    return text


def app_question(rng: random.Random, intent: str) -> str:
    core = rng.choice(APP_INTENTS[intent][1])
    prefix = rng.choice(QUESTION_PREFIXES)
    suffix = rng.choice(QUESTION_SUFFIXES)
    if prefix and core[0].isupper() and rng.random() < 0.5 and not core.startswith("LlamaDesk"):
        core = core[0].lower() + core[1:]
    return _case(rng, prefix + core) + suffix


def talk_question(rng: random.Random, intent: str) -> str:
    core = rng.choice(TALK_INTENTS[intent][1])
    if intent in ("greet", "thanks", "bye") or not core.endswith(("?", ".")):
        core = core + rng.choice(TALK_PUNCT[:4])
        if intent == "greet" and rng.random() < 0.2:
            core = core.rstrip("!.") + rng.choice([", LlamaDesk!", ", friend!", " again!"])
    return _case(rng, core)


def _sample(rng: random.Random, make: Callable[[], str], held_out: bool) -> str:
    for _ in range(200):
        text = make()
        if is_held_out_text(text) == held_out:
            return text
    raise RuntimeError("could not sample a phrasing")


def turn_app(rng: random.Random, held_out: bool = False) -> tuple[str, str]:
    intent = rng.choice(sorted(APP_INTENTS))
    q = _sample(rng, lambda: app_question(rng, intent), held_out)
    return q, APP_INTENTS[intent][0]


def turn_talk(rng: random.Random, held_out: bool = False) -> tuple[str, str]:
    intent = rng.choice(sorted(TALK_INTENTS))
    q = _sample(rng, lambda: talk_question(rng, intent), held_out)
    return q, TALK_INTENTS[intent][0]


def arith_answer(a: int, op: str, b: int) -> str:
    c = a + b if op == "+" else a - b
    return f"{a} {op} {b} = {c}."


_ARITH_ANSWER = re.compile(r"\d+ [+-] \d+ = (-?\d+)\.")


def arith_result_span(reply: str) -> tuple[int, int] | None:
    """Where the computed number sits in an arith_answer() reply (the rest is copied)."""
    m = _ARITH_ANSWER.fullmatch(reply)
    return m.span(1) if m else None


def turn_arith(rng: random.Random, held_out: bool = False) -> tuple[str, str]:
    while True:
        op = rng.choice("+-")
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if is_held_out_pair(a, op, b) == held_out:
            break
    q = rng.choice(ARITH_TEMPLATES[op]).format(a=a, b=b)
    if rng.random() < 0.1:
        q = rng.choice(QUESTION_PREFIXES[4:]) + q
    return q, arith_answer(a, op, b)


def turn_multiply(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    return rng.choice(MULTIPLY_TEMPLATES).format(a=a, b=b), MULTIPLY


def turn_repeat(
    rng: random.Random, held_out: bool = False, common_only: bool = False
) -> tuple[str, str]:
    while True:
        n = rng.choice([2, 3, 3, 3, 4, 4, 5, 6])
        items: list[str] = []
        while len(items) < n:
            w = _random_word(rng, common_only)
            if w not in items:
                items.append(w)
        if is_held_out_list(items) == held_out:
            break
    listing = ", ".join(items)
    return rng.choice(REPEAT_TEMPLATES).format(L=listing), listing


def turn_ood(rng: random.Random) -> tuple[str, str]:
    q = rng.choice(OOD_TEMPLATES).format(
        place=rng.choice(OOD_PLACES),
        book=rng.choice(OOD_BOOKS),
        thing=rng.choice(LIST_WORDS),
        sky=rng.choice(OOD_SKY),
        a=rng.randint(2, 99),
        b=rng.randint(2, 9),
    )
    return _case(rng, q), FALLBACK


def turn_no_name(rng: random.Random) -> tuple[str, str]:
    return rng.choice(NAME_QUESTIONS), NO_NAME


def turn_intro(rng: random.Random, name: str) -> tuple[str, str]:
    return rng.choice(NAME_INTROS).format(N=name), NAME_REPLY.format(N=name)


def turn_recall(rng: random.Random, name: str) -> tuple[str, str]:
    return rng.choice(NAME_QUESTIONS), NAME_ANSWER.format(N=name)


def _filler(rng: random.Random, named: bool) -> tuple[str, str]:
    r = rng.random()
    if r < 0.16:
        return turn_app(rng)
    if r < 0.23:
        return turn_talk(rng)
    if r < 0.71:  # the slowest skill to learn gets the largest share
        return turn_arith(rng)
    if r < 0.90:
        return turn_repeat(rng)
    if r < 0.94:
        return turn_ood(rng)
    if r < 0.97 or named:
        return turn_multiply(rng)
    return turn_no_name(rng)


@dataclass
class Conversation:
    messages: list[Message]
    # strings the assistant copies from earlier turns (names, repeated lists): training weighs
    # their tokens more, since a copy is the hard part of these replies
    copies: tuple[str, ...] = ()

    def text(self) -> str:
        return render(self.messages)


def _to_conversation(
    turns: list[tuple[str, str]], system: str | None = None, copies: tuple[str, ...] = ()
) -> Conversation:
    msgs: list[Message] = []
    if system is not None:
        msgs.append({"role": "system", "content": system})
    for user, assistant in turns:
        msgs.append({"role": "user", "content": user})
        msgs.append({"role": "assistant", "content": assistant})
    return Conversation(msgs, copies)


def conversation(rng: random.Random, pieces: Sequence[str] = ()) -> Conversation:
    system = rng.choice(SYSTEM_PROMPTS) if rng.random() < 0.12 else None
    turns: list[tuple[str, str]] = []
    copies: tuple[str, ...] = ()
    if rng.random() < 0.35:
        name = random_name(rng, pieces)
        copies = (name,)
        for _ in range(rng.choice([0, 0, 0, 1])):
            turns.append(_filler(rng, named=False))
        turns.append(turn_intro(rng, name))
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
            turns.append(_filler(rng, named=True))
        turns.append(turn_recall(rng, name))
        if rng.random() < 0.25:
            turns.append(_filler(rng, named=True))
            if rng.random() < 0.5:
                turns.append(turn_recall(rng, name))
    else:
        for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
            turns.append(_filler(rng, named=False))
    return _to_conversation(turns, system, copies)


def _copy_word(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.35:
        word = rng.choice(LIST_WORDS)
    elif r < 0.7:
        word = _syllables(rng, rng.choice([1, 1, 2, 2, 3]))
    else:
        word = letter_string(rng, 1, 6)
    return word.capitalize() if rng.random() < 0.4 else word


def turn_repeat_long(rng: random.Random) -> tuple[str, str]:
    """Repeat a long list of unrelated words: too long to copy by counting positions, so
    training finds the order-keeping copy (match the current token, emit what followed it)."""
    items = [_copy_word(rng) for _ in range(rng.randint(4, 20))]
    listing = ", ".join(items) if rng.random() < 0.6 else " ".join(items)
    return rng.choice(REPEAT_TEMPLATES).format(L=listing), listing


def copy_conversation(rng: random.Random, pieces: Sequence[str] = ()) -> Conversation:
    """Short copy-heavy dialogues (names, lists of words or random letters).

    They open the training (so that the copying circuit forms before the full mixture) and
    stay a fixed share of every later batch (so that it is not forgotten).
    """
    turns: list[tuple[str, str]] = []
    copies: list[str] = []
    r = rng.random()
    if r < 0.6:
        name = random_name(rng, pieces)
        copies.append(name)
        if rng.random() < 0.3:
            turns.append(_filler(rng, named=False))
        turns.append(turn_intro(rng, name))
        for _ in range(rng.choice([0, 1, 1, 2])):
            turns.append(_filler(rng, named=True))
        turns.append(turn_recall(rng, name))
    else:
        for _ in range(rng.choice([1, 2])):
            turn = turn_repeat_long(rng) if rng.random() < 0.7 else turn_repeat(rng)
            turns.append(turn)
            copies.append(turn[1])
    return _to_conversation(turns, copies=tuple(copies))


def micro_copy_conversation(rng: random.Random, pieces: Sequence[str] = ()) -> Conversation:
    """A tiny dialogue whose reply copies a short string from a few tokens back.

    These open the training: with the source this close, attention finds it at once and the
    order-keeping copy (match the current token, emit the one that followed it) forms within
    a few hundred steps; with the source far back in long dialogues it takes thousands.
    """
    r = rng.random()
    if r < 0.5:
        items = [_copy_word(rng) for _ in range(rng.choice([1, 1, 2, 3, 4]))]
        if rng.random() < 0.5:
            items[0] = random_name(rng, pieces)
        listing = ", ".join(items) if rng.random() < 0.5 else " ".join(items)
        turns = [(rng.choice(REPEAT_TEMPLATES).format(L=listing), listing)]
    else:
        name = random_name(rng, pieces)
        turns = [turn_intro(rng, name)]
        if r > 0.75:
            turns.append(turn_recall(rng, name))
        listing = name
    return _to_conversation(turns, copies=(listing,))


def build_corpus(seed: int, n: int, *, pieces: Sequence[str]) -> list[Conversation]:
    rng = random.Random(seed)
    return [conversation(rng, pieces) for _ in range(n)]


def build_copy_corpus(seed: int, n: int, *, pieces: Sequence[str]) -> list[Conversation]:
    rng = random.Random(seed + 1)
    return [copy_conversation(rng, pieces) for _ in range(n)]


def build_micro_corpus(seed: int, n: int, *, pieces: Sequence[str]) -> list[Conversation]:
    rng = random.Random(seed + 2)
    return [micro_copy_conversation(rng, pieces) for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Evaluation set
# ---------------------------------------------------------------------------------------------


def build_eval(seed: int) -> dict[str, object]:
    """50 single-turn questions (held-out phrasings / pairs / lists) and 20 recall dialogues."""
    rng = random.Random(10_000 + seed)
    questions: list[dict[str, str]] = []
    seen: set[str] = set()

    def add(kind: str, q: str, a: str) -> bool:
        if q in seen:
            return False
        seen.add(q)
        questions.append({"kind": kind, "question": q, "expected": a})
        return True

    for intent in sorted(APP_INTENTS):  # 11 intents, 2 phrasings each -> 22
        count = 0
        while count < 2:
            q = _sample(rng, lambda intent=intent: app_question(rng, intent), True)
            count += add("app", q, APP_INTENTS[intent][0])
    for intent in sorted(TALK_INTENTS):  # 6
        while not add(
            "talk",
            _sample(rng, lambda intent=intent: talk_question(rng, intent), True),
            TALK_INTENTS[intent][0],
        ):
            pass
    n_arith = 0
    while n_arith < 10:
        op = "+" if n_arith % 2 == 0 else "-"
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if not is_held_out_pair(a, op, b):
            continue
        template = "What is {a} " + op + " {b}?" if n_arith < 6 else rng.choice(ARITH_TEMPLATES[op])
        n_arith += add("arith", template.format(a=a, b=b), arith_answer(a, op, b))
    n_rep = 0
    while n_rep < 6:
        q, a = turn_repeat(rng, held_out=True, common_only=True)
        if n_rep < 2:
            q = "Repeat after me: " + a
        n_rep += add("repeat", q, a)
    add("no_name", "What is my name?", NO_NAME)
    while len(questions) < 50:
        q, a = turn_ood(rng)
        add("ood", q, a)

    recall: list[dict[str, str]] = []
    names = list(HELD_OUT_NAMES)
    rng.shuffle(names)
    for i, name in enumerate(names[:20]):
        if i % 2 == 0:
            mid, _ = turn_talk(rng, held_out=True)
        else:
            mid, _ = turn_arith(rng, held_out=True)
        recall.append(
            {
                "name": name,
                "turn1": f"My name is {name}.",
                "turn2": mid,
                "turn3": "What is my name?",
            }
        )
    return {"seed": seed, "questions": questions, "recall": recall}


def tokenizer_probe_texts() -> list[str]:
    """Extra strings for the tokenizer equality check (edge cases beyond the corpus)."""
    return [
        "Hello   world\n\n  tabs\tand  spaces ",
        "What is 1234567 + 89?",
        "It's, I'll, we've, they're, he'd, I'M, YOU'LL",
        "Ünïcödé: Zoë, Søren, Łukasz, Dvořák, 東京, emoji 🙂",
        "C:\\Users\\me\\LLAMADESK_HOME = /home/me/.local",
        "  leading spaces and trailing   ",
        "line1\r\nline2\n\n\nline3",
        "a-b_c.d,e;f:g!h?i(j)k[l]m{n}o",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "Ctrl+, Ctrl+T Ctrl+W Esc",
    ]
