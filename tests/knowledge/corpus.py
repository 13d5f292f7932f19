"""A small real-text corpus: six unrelated topics, a few paragraphs each."""

from __future__ import annotations

TOPICS: dict[str, str] = {
    "volcanoes": (
        "A volcano is an opening in the crust of a planet through which molten rock, "
        "ash and gases escape from a magma chamber below the surface. When pressure in "
        "the chamber builds up, an eruption can send lava flows down the slopes and "
        "throw ash clouds high into the atmosphere.\n\n"
        "Stratovolcanoes such as Mount Fuji are built from alternating layers of "
        "hardened lava and volcanic ash. Their eruptions are often explosive, while "
        "shield volcanoes like those of Hawaii produce runny basalt lava that spreads "
        "over wide areas.\n\n"
        "Volcanologists monitor earthquakes, ground deformation and sulfur dioxide "
        "emissions to forecast eruptions and warn the people who live nearby."
    ),
    "bread": (
        "Baking bread starts with flour, water, salt and yeast. Kneading the dough "
        "develops gluten, a network of proteins that traps the carbon dioxide the "
        "yeast releases, so the loaf rises.\n\n"
        "Sourdough bread uses a starter of wild yeast and lactic acid bacteria instead "
        "of commercial yeast. The long fermentation gives the crumb its tangy flavour "
        "and open structure.\n\n"
        "A hot oven with steam during the first minutes of baking lets the crust stay "
        "soft long enough for the loaf to expand, then brown into a crisp crust."
    ),
    "tcp": (
        "The Transmission Control Protocol provides reliable, ordered delivery of a "
        "stream of bytes between applications on networked computers. A connection "
        "begins with a three-way handshake of SYN, SYN-ACK and ACK segments.\n\n"
        "TCP uses sequence numbers and acknowledgements to detect lost packets and "
        "retransmit them. Flow control with a sliding receive window stops a fast "
        "sender from overwhelming a slow receiver.\n\n"
        "Congestion control algorithms such as Reno and CUBIC reduce the sending rate "
        "when the network drops packets, and grow it again when the path is clear."
    ),
    "chess": (
        "Chess is a strategy board game for two players on a board of sixty-four "
        "squares. Each player starts with sixteen pieces: a king, a queen, two rooks, "
        "two bishops, two knights and eight pawns.\n\n"
        "Openings such as the Sicilian Defence and the Queen's Gambit aim to control "
        "the centre, develop the knights and bishops quickly and bring the king to "
        "safety by castling.\n\n"
        "The game ends in checkmate when the king is attacked and has no legal move "
        "that escapes the attack; a stalemate, by contrast, is a draw."
    ),
    "photosynthesis": (
        "Photosynthesis is the process by which green plants, algae and some bacteria "
        "convert light energy into chemical energy. Chlorophyll in the chloroplasts "
        "absorbs sunlight, mostly in the blue and red wavelengths.\n\n"
        "In the light-dependent reactions water is split, releasing oxygen, and the "
        "energy is stored in ATP and NADPH. The Calvin cycle then uses that energy to "
        "fix carbon dioxide from the air into sugars such as glucose.\n\n"
        "Because plants take up carbon dioxide and release oxygen, photosynthesis "
        "shapes the composition of the atmosphere and feeds almost every food chain."
    ),
    "aqueducts": (
        "Roman aqueducts carried fresh water from distant springs into cities, using "
        "only gravity. Engineers kept a slight, steady downward gradient over many "
        "kilometres of channels, tunnels and bridges.\n\n"
        "The Pont du Gard in southern France is a famous aqueduct bridge with three "
        "tiers of stone arches. Inside the city, the water filled public fountains, "
        "baths and the houses of wealthy citizens through lead pipes.\n\n"
        "Sediment and limescale deposits had to be cleared regularly, and many "
        "aqueducts stayed in use for centuries after they were built."
    ),
}

QUESTIONS: dict[str, str] = {
    "volcanoes": "How do lava and ash come out of a magma chamber during an eruption?",
    "bread": "Why does dough rise when yeast ferments it?",
    "tcp": "How does the handshake start a reliable network connection?",
    "photosynthesis": "How do plants turn sunlight into sugar?",
}
"""A question for each of these topics, in other words than its text."""
