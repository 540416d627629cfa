"""Original prose for the bundled sample crawl.

Written for this project (not copied from any crawl or web page), so the sample can ship under the
project's own licence and tests can reason about what the text is. English paragraphs carry a topic
tag so a generated article can lead with paragraphs that match its title.
"""

from __future__ import annotations

# (topic, paragraph). Each paragraph is 80-150 words of well-formed English prose.
ENGLISH: tuple[tuple[str, str], ...] = (
    (
        "science",
        "On a clear afternoon the sky looks blue because air molecules scatter short wavelengths of "
        "sunlight far more strongly than long ones. Violet light is scattered even more than blue, yet "
        "our eyes are less sensitive to it and some of it is absorbed high in the atmosphere, so the "
        "overall impression is a soft, even blue. Near sunset the light travels through a much thicker "
        "layer of air before it reaches us. By then most of the blue has been scattered away to the "
        "sides, and the reds and oranges that remain give the horizon its familiar warm glow. Dust, "
        "smoke and water droplets change the picture again, which is why summer haze can turn the whole "
        "sky a pale, milky white.",
    ),
    (
        "science",
        "Tardigrades, often called water bears, are among the toughest animals ever studied. They are "
        "smaller than a grain of sand and live in damp moss, leaf litter and the sediment of ponds. When "
        "their surroundings dry out, they pull in their legs, lose almost all of their water and enter a "
        "state in which their metabolism nearly stops. In this form they have survived freezing, intense "
        "radiation and even a short exposure to the vacuum of space. Researchers think special proteins "
        "replace water inside their cells and hold delicate structures in place like a kind of glass. "
        "Add a drop of water and, within an hour or so, the animal can wake up and start walking again.",
    ),
    (
        "science",
        "A honeybee that finds a rich patch of flowers does not keep the news to herself. Back in the "
        "hive she performs a waggle dance on the vertical surface of the comb, running a short straight "
        "line while shaking her body and then looping back to repeat it. The angle of that run relative "
        "to straight up tells the other foragers the direction of the food relative to the sun. The "
        "length of the waggle phase encodes distance, so a longer run means a longer flight. Bees that "
        "follow the dance also pick up the scent of the flowers from her body. The system is so precise "
        "that scientists can decode a dance and walk to the same field themselves.",
    ),
    (
        "cooking",
        "A sourdough starter is nothing more than flour and water that have been given time to collect "
        "wild yeast and lactic acid bacteria. Mix equal weights of whole wheat flour and lukewarm water "
        "in a clean jar, cover it loosely and leave it somewhere warm. Each day, discard about half and "
        "feed what remains with fresh flour and water. For the first few days the mixture may smell "
        "strange or even unpleasant, but that phase passes as the friendly microbes take over. After one "
        "or two weeks a healthy starter will double in size within a few hours of feeding and smell "
        "pleasantly sour, a little like yogurt or green apples. At that point it is ready to raise bread.",
    ),
    (
        "cooking",
        "Properly caramelized onions cannot be rushed, no matter what a quick recipe promises. Slice "
        "several large onions thinly and put them in a wide, heavy pan with a generous spoonful of butter "
        "or oil over medium heat. Stir every few minutes and lower the heat as soon as the edges begin to "
        "catch. If brown patches form on the bottom of the pan, add a splash of water and scrape them "
        "loose, because that fond carries most of the flavor. The whole process usually takes forty "
        "minutes to an hour. The result is a soft, jammy, deep brown mass that tastes sweet without any "
        "added sugar and transforms soups, sandwiches and simple pasta dishes.",
    ),
    (
        "cooking",
        "Seasoning a cast iron pan is less mysterious than it sounds. The black coating is simply a thin "
        "layer of oil that has been heated until it bonds to the metal and forms a hard, slick surface. "
        "To build it, wash the pan, dry it completely on the stove and rub a very small amount of neutral "
        "oil over every surface. Then wipe it off as if you had made a mistake, leaving only a faint "
        "sheen behind. Bake the pan upside down in a hot oven for an hour and let it cool inside. Repeat "
        "this three or four times. Everyday cooking with fat will keep improving the finish for years.",
    ),
    (
        "travel",
        "There is a particular pleasure in watching a landscape change through the window of a slow "
        "train. Leaving the city at dawn, you pass warehouses and allotments, then open farmland, and "
        "finally the first foothills where the track begins to curve around lakes and through short "
        "tunnels. Unlike a flight, the journey itself becomes part of the holiday rather than an obstacle "
        "between you and it. Night trains add another layer of romance, because you fall asleep in one "
        "country and wake up in another with coffee arriving at the door. Booking early makes a large "
        "difference to the price, and a private compartment is often cheaper than two hotel nights.",
    ),
    (
        "travel",
        "Packing light is mostly a matter of deciding in advance what you will not need. Start by laying "
        "out everything you want to bring, then remove a third of it without negotiation. Choose clothes "
        "in two or three colors that can all be worn together, and favor fabrics that dry overnight after "
        "a quick wash in the sink. One pair of comfortable walking shoes is worth more than three pairs of "
        "fashionable ones. Keep toiletries in small refillable bottles and remember that almost anything "
        "forgotten can be bought at your destination. A small bag makes trains, stairs and narrow old "
        "streets far easier, and it leaves room for the things you discover along the way.",
    ),
    (
        "travel",
        "The quickest way to feel at home in an unfamiliar city is to spend a morning at its main market. "
        "Arrive early, when the stalls are still being stacked and the traders have time to talk. Learn "
        "how to say hello, thank you and how much in the local language before you go, because even a "
        "clumsy attempt is usually met with a smile. Buy a piece of fruit you have never seen before and "
        "ask how it is eaten. Watch what the locals queue for, since a long line almost always points to "
        "the best bread or the freshest fish. By lunchtime you will have a bag of snacks, a few new words "
        "and a much clearer sense of the place.",
    ),
    (
        "history",
        "When movable type printing spread across Europe in the second half of the fifteenth century, it "
        "changed far more than the speed at which books could be produced. Before the press, a single "
        "manuscript could take a scribe months to copy, and every copy introduced new errors. Printed "
        "editions made it possible for scholars in different cities to read exactly the same text and "
        "argue about the same page numbers. Within a few decades, presses were operating in hundreds of "
        "towns, and pamphlets carried religious and political arguments to readers who had never owned a "
        "book. Historians still debate how quickly literacy rose, but few doubt that the printing press "
        "helped shape the modern world.",
    ),
    (
        "history",
        "For more than two centuries, lighthouse keepers lived lives of careful routine on rocky islands "
        "and remote headlands. Every evening they climbed the tower to trim the wicks, polish the lenses "
        "and light the lamp, and through the night they returned again and again to wind the clockwork "
        "that turned the light. Logbooks recorded the weather, passing ships and any fault in the "
        "equipment. Families often lived at the station, and children were sometimes rowed to school "
        "across open water. Automation gradually replaced the keepers during the twentieth century. Today "
        "many former stations are museums or holiday cottages, and visitors can climb the same narrow "
        "stairs the keepers once climbed.",
    ),
    (
        "history",
        "The canal boom of the late eighteenth century began with a simple calculation. A single horse "
        "walking along a towpath could pull a barge carrying many times the load it could drag in a cart "
        "over muddy roads. Investors quickly saw the profit in moving coal, grain and pottery this way, "
        "and engineers began cutting waterways across entire regions. They built locks to climb hills, "
        "aqueducts to cross valleys and long tunnels through which boatmen pushed their craft by lying on "
        "their backs and walking along the walls. Railways overtook the canals within a few generations. "
        "Many routes have since been restored for leisure boating, walking and cycling.",
    ),
    (
        "software",
        "Before refactoring a piece of legacy code, it pays to write tests that pin down what the code "
        "currently does, even when that behavior looks wrong. These characterization tests are not a "
        "statement that the existing output is correct. They simply make every change visible, so that "
        "you can decide deliberately which differences are fixes and which are accidents. Start at the "
        "outermost boundary you can reach, such as a command line call or a public function, and record "
        "its results for a range of realistic inputs. Once the safety net is in place, small steps become "
        "cheap. Rename a variable, extract a function, run the tests and commit before moving on.",
    ),
    (
        "software",
        "A good commit message explains why a change was made, not only what changed. The diff already "
        "shows which lines moved, but six months later nobody will remember that a timeout was raised "
        "because a partner service became slow during its nightly backup. Write a short summary line in "
        "the imperative mood, leave a blank line, and then describe the problem, the reasoning behind the "
        "chosen fix and any alternatives that were rejected. Link to the issue or incident where it "
        "helps. Keep each commit focused on one idea, because a history made of small, well described "
        "steps is much easier to review, to bisect when a bug appears and to revert when necessary.",
    ),
    (
        "software",
        "Caching is one of the most effective ways to make a slow system fast, and also one of the most "
        "reliable ways to introduce confusing bugs. The hard part is rarely storing a value. The hard "
        "part is knowing when that value has stopped being true. Before adding a cache, write down who "
        "is allowed to change the underlying data and how the cache will learn about it. Prefer short "
        "expiry times at first and measure the hit rate before tuning anything. Include the version of "
        "the code or the schema in every cache key, so a deployment cannot serve results computed by "
        "older logic. Finally, make sure there is a simple way to clear everything.",
    ),
    (
        "sports",
        "The long run is the backbone of most marathon training plans, but it is meant to be slow. "
        "Running at an easy, conversational pace teaches the body to burn fat efficiently, strengthens "
        "tendons and builds the confidence to stay on your feet for several hours. Many beginners make "
        "the mistake of racing their weekend runs and then arriving at the start line already tired. A "
        "useful rule is to increase the distance of the longest run by no more than a couple of "
        "kilometers each week, with a shorter recovery week every month. Practice drinking and eating "
        "during these runs too, because race day is the wrong time to find out how your stomach behaves.",
    ),
    (
        "sports",
        "Anyone who has played in an amateur football team knows that the best eleven players do not "
        "always make the best side. A team that talks constantly, covers for each other and knows who "
        "takes the free kicks will often beat a group of more talented individuals. Coaches at this level "
        "spend surprising amounts of time on simple habits, such as calling for the ball early, tracking "
        "back after losing possession and shaking hands with the referee at the end. Regular training "
        "nights and a shared drink after the match matter as well. Players who enjoy each other's company "
        "keep turning up on cold, wet evenings in the middle of winter.",
    ),
    (
        "sports",
        "Cyclists talk a great deal about cadence, the number of times the pedals turn each minute. "
        "Pushing a very hard gear at a low cadence may feel powerful, but it puts heavy strain on the "
        "knees and tires the leg muscles quickly. Spinning a lighter gear faster shifts more of the work "
        "to the heart and lungs, which recover much sooner. Many experienced riders settle somewhere "
        "between eighty and ninety revolutions per minute on flat roads. If you are new to the idea, try "
        "counting pedal strokes for fifteen seconds and multiplying by four. Then change down a gear and "
        "see whether the next climb feels any easier.",
    ),
    (
        "gardening",
        "Pruning roses in late winter feels brutal the first time, yet the plants respond with stronger "
        "growth and more flowers. Begin by removing anything dead, damaged or diseased, cutting back to "
        "healthy green wood. Next, take out thin, weak stems and any branches that cross through the "
        "center of the bush, since good airflow helps prevent fungal problems later in the year. Finally, "
        "shorten the remaining canes by about a third to a half, making each cut just above an outward "
        "facing bud at a slight angle. Use sharp, clean secateurs and wear thick gloves. Clear away the "
        "fallen leaves so that disease spores do not overwinter beneath the plant.",
    ),
    (
        "gardening",
        "A compost heap turns kitchen scraps and garden waste into one of the most useful materials a "
        "gardener can own. The basic recipe is a balance of green materials, such as vegetable peelings "
        "and grass clippings, and brown materials, such as dry leaves, straw and torn cardboard. Too much "
        "green and the heap becomes slimy and smelly. Too much brown and it barely changes at all. Keep "
        "the pile about as damp as a wrung out sponge and turn it with a fork every few weeks to let air "
        "in. Depending on the weather, the finished compost will be dark, crumbly and ready to use in six "
        "months to a year.",
    ),
    (
        "gardening",
        "Tomatoes grow surprisingly well in containers, even on a small balcony, as long as they receive "
        "at least six hours of direct sunlight. Choose a pot that holds at least twenty liters, because "
        "small pots dry out quickly and stress the plants. Fill it with a good quality potting mix rather "
        "than garden soil, and add a sturdy stake or cage at planting time so the roots are not disturbed "
        "later. Water deeply and consistently, ideally in the morning, since irregular watering is the "
        "main cause of split fruit. Once the first flowers appear, feed every week with a fertilizer that "
        "is rich in potassium. Compact varieties are the easiest to manage.",
    ),
    (
        "finance",
        "An emergency fund is the least exciting part of personal finance and probably the most "
        "important. The idea is to keep enough money in an easily accessible savings account to cover "
        "several months of essential expenses, such as rent, food, insurance and transport. When the "
        "car breaks down or a job ends unexpectedly, that cushion means you do not have to rely on "
        "expensive credit or sell investments at a bad moment. If saving three to six months of costs "
        "sounds impossible, start with a smaller target, such as one month, and automate a transfer on "
        "payday. Treat the fund as insurance rather than an investment, and refill it promptly after you "
        "use it.",
    ),
    (
        "finance",
        "Compound growth is easy to describe and hard to feel. If an investment earns a steady return "
        "each year and the gains are reinvested, each year's growth is calculated on a slightly larger "
        "sum than the year before. Over a few years the effect looks modest, but over several decades it "
        "dominates everything else. This is why starting early matters more than picking the perfect "
        "fund. Low cost index funds are popular with long term savers because they spread money across "
        "hundreds of companies and charge very small fees, which otherwise quietly eat into those "
        "compounded returns. Markets will fall sharply from time to time, and patience is the only "
        "reliable strategy through those periods.",
    ),
    (
        "finance",
        "Once a year it is worth sitting down with three months of bank statements and a cup of tea to "
        "see where the money actually goes. Many households are surprised by the total of small recurring "
        "payments: streaming services, apps, memberships and subscriptions that were meant to be trials. "
        "Mark each one as essential, useful or forgotten, and cancel the forgotten ones immediately. Then "
        "look at larger fixed costs such as insurance, energy and phone contracts, which can often be "
        "renegotiated with a single call. The aim is not to give up everything enjoyable. It is to make "
        "sure that spending reflects your priorities rather than old habits.",
    ),
    (
        "health",
        "Good sleep depends more on routine than on any special pillow or supplement. Going to bed and "
        "getting up at roughly the same time every day, including weekends, helps the body clock settle "
        "into a stable rhythm. Bright daylight in the morning strengthens that rhythm, while bright "
        "screens late in the evening tend to push it later. Keep the bedroom cool, dark and quiet, and "
        "reserve the bed for sleep rather than work or long scrolling sessions. Caffeine can linger in "
        "the body for many hours, so an afternoon coffee may still be active at midnight. If you cannot "
        "sleep, get up and read quietly until you feel drowsy.",
    ),
    (
        "health",
        "A short walk after a meal is one of the simplest habits with measurable benefits. Studies have "
        "found that even ten or fifteen minutes of gentle movement after eating can reduce the spike in "
        "blood sugar that follows a large meal. Walking also aids digestion, clears the head after a long "
        "day at a desk and is an easy way to spend time with family or friends. There is no need for "
        "special clothing or equipment. If the weather is bad, climbing the stairs a few times or tidying "
        "the kitchen has a similar effect. The key is consistency, because small daily habits add up over "
        "months and years.",
    ),
    (
        "health",
        "Many people who work at a desk slowly drift into a posture that leaves their neck and shoulders "
        "aching by the afternoon. The screen should sit at about eye level, roughly an arm's length away, "
        "so that you are not constantly looking down. Feet should rest flat on the floor, with the knees "
        "near the height of the hips. More important than any perfect position, however, is changing "
        "position often. Set a reminder to stand up every half hour, roll your shoulders and look at "
        "something in the distance to rest your eyes. A few minutes of stretching in the morning and "
        "evening can make a noticeable difference within a couple of weeks.",
    ),
    (
        "astronomy",
        "You do not need a telescope to see the four largest moons of Jupiter. A steady pair of "
        "binoculars, braced against a wall or mounted on a tripod, will show them as tiny points of light "
        "lined up on either side of the planet. They were first recorded by Galileo in 1610, and watching "
        "them night after night reveals why they made such an impression on him. Their positions change "
        "noticeably from one evening to the next as they orbit, and sometimes one disappears behind the "
        "planet or into its shadow. Jupiter is usually the brightest object in the night sky after the "
        "Moon and Venus, which makes it easy to find.",
    ),
    (
        "music",
        "Learning an instrument as an adult is humbling, rewarding and entirely possible. Adults often "
        "progress more slowly at first than children, partly because they expect too much of themselves "
        "and partly because they have less free time. On the other hand, adults understand structure, "
        "can follow theory more easily and usually know exactly why they want to play. Short, frequent "
        "practice sessions work far better than one long session at the weekend. Fifteen focused minutes "
        "a day is enough to notice steady improvement. Recording yourself every few weeks helps as well, "
        "since it is easy to forget how far you have come.",
    ),
    (
        "home",
        "A dripping tap wastes a surprising amount of water over a year, and the repair is usually simple. "
        "First turn off the water supply, either at the isolation valve under the sink or at the main "
        "stopcock, and open the tap to drain any remaining water. Put the plug in the sink so small parts "
        "cannot disappear down the drain. Remove the handle and unscrew the valve body with a spanner. "
        "Older taps usually have a rubber washer at the bottom that has hardened or split over time, while "
        "modern ones use a ceramic cartridge. Take the old part to a hardware shop to find an exact match, "
        "then reassemble everything in reverse order.",
    ),
    (
        "nature",
        "Winter is the best season to start watching garden birds, because food is scarce and they are "
        "easier to attract. Hang a feeder filled with sunflower hearts near a hedge or tree, so small "
        "birds have somewhere to retreat when a hawk passes over. A shallow dish of fresh water is just as "
        "valuable, especially during frosty spells when puddles freeze. Clean feeders regularly to stop "
        "diseases from spreading between visitors. Within a few weeks you will start to recognize "
        "regulars and notice their habits, from the bold robins that follow the spade to the finches "
        "that arrive in noisy groups. A simple notebook turns these observations into a record.",
    ),
    (
        "photography",
        "Photographers talk about the golden hour, the period shortly after sunrise and before sunset "
        "when the sun sits low in the sky. At that angle its light passes through more of the atmosphere, "
        "becoming warmer in color and softer in contrast. Shadows grow long and reveal texture in brick "
        "walls, tree bark and faces, while harsh midday glare disappears. To make the most of it, arrive "
        "early and plan your composition before the light changes, because the best moments can last "
        "only a few minutes. The blue hour that follows sunset is equally rewarding. City lights begin to "
        "glow against a deep blue sky that still holds some detail.",
    ),
)

# One short, unique-sounding opening per topic for article titles. The generator combines them with
# qualifiers so every good article has its own title.
TITLES: dict[str, tuple[str, ...]] = {
    "science": (
        "Why the Sky Changes Color",
        "The Toughest Animals on Earth",
        "How Bees Share Directions",
        "Everyday Physics You Can See",
        "Small Creatures, Big Surprises",
    ),
    "cooking": (
        "Keeping a Sourdough Starter Alive",
        "The Patience of Caramelized Onions",
        "Caring for Cast Iron",
        "Simple Techniques for Better Home Cooking",
        "Slow Food at Home",
    ),
    "travel": (
        "Crossing the Mountains by Train",
        "The Art of Packing Light",
        "Mornings at the Market",
        "Slow Travel for Busy People",
        "Notes from a Night Train",
    ),
    "history": (
        "How Printing Changed Europe",
        "Life at the Lighthouse",
        "The Age of the Canals",
        "Forgotten Trades of the Coast",
        "Reading the Past in Old Maps",
    ),
    "software": (
        "Tests Before Refactoring",
        "Writing Commit Messages That Help",
        "When Caching Goes Wrong",
        "Lessons from Maintaining Old Code",
        "Small Steps in Software Design",
    ),
    "sports": (
        "Slow Long Runs and Fast Marathons",
        "What Makes an Amateur Team Work",
        "Understanding Cadence on the Bike",
        "Training Through the Winter",
        "The Weekend Athlete",
    ),
    "gardening": (
        "Pruning Roses Without Fear",
        "A Beginner's Compost Heap",
        "Tomatoes on the Balcony",
        "The Allotment Year",
        "Soil, Sun and Patience",
    ),
    "finance": (
        "Building an Emergency Fund",
        "The Quiet Power of Compound Growth",
        "The Annual Money Review",
        "Budgeting Without Misery",
        "Saving for the Long Term",
    ),
    "health": (
        "Sleep Habits That Actually Work",
        "The Case for an After-Dinner Walk",
        "Sitting Better at Your Desk",
        "Small Habits, Lasting Health",
        "Rest and Recovery",
    ),
    "astronomy": (
        "Jupiter's Moons Through Binoculars",
        "Stargazing from the Back Garden",
        "A Guide to the Winter Sky",
    ),
    "music": ("Learning an Instrument After Forty", "Practice That Sticks", "Starting Music Again"),
    "home": ("Fixing a Dripping Tap", "Weekend Repairs for Renters", "The Household Toolkit"),
    "nature": ("Feeding Garden Birds in Winter", "A Year of Birdwatching", "Wildlife on the Doorstep"),
    "photography": ("Chasing the Golden Hour", "Better Photos at Dusk", "Light, Shadow and Texture"),
}

TITLE_QUALIFIERS: tuple[str, ...] = (
    "",
    ": A Practical Guide",
    ": What I Learned",
    " in Five Steps",
    ": Questions from Readers",
    ": Myths and Facts",
    " for Beginners",
    ": A Second Look",
    ", Explained",
    ": Notes from This Season",
)

FIRST_NAMES: tuple[str, ...] = (
    "Alice",
    "Ben",
    "Clara",
    "Daniel",
    "Esther",
    "Farid",
    "Grace",
    "Hugo",
    "Ingrid",
    "Jonah",
    "Keiko",
    "Liam",
    "Maya",
    "Nikos",
    "Olivia",
    "Pedro",
    "Quinn",
    "Rosa",
    "Samuel",
    "Tara",
    "Umar",
    "Vera",
    "Wendell",
    "Ximena",
    "Yusuf",
    "Zoe",
)
LAST_NAMES: tuple[str, ...] = (
    "Abbott",
    "Brennan",
    "Castillo",
    "Dunmore",
    "Ellison",
    "Fairweather",
    "Gallagher",
    "Holm",
    "Iverson",
    "Jansen",
    "Kowalczyk",
    "Lindqvist",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Pemberton",
    "Quarles",
    "Rahman",
    "Sorensen",
    "Thornbury",
    "Underhill",
    "Vasquez",
    "Whitlock",
    "Yamada",
    "Zeller",
)

# Openers that make each article's lede unique; formatted with the author's name and a place.
LEDES: tuple[str, ...] = (
    "{author} has been collecting notes on this subject for years, and this piece gathers the most "
    "useful of them after a long season in {place}.",
    "This article grew out of a question a reader in {place} sent to {author} last month, and the answer "
    "turned out to be longer than expected.",
    "When {author} first tried this in {place}, almost everything went wrong, which is exactly why the "
    "lessons below are worth sharing.",
    "Readers in {place} asked {author} for a plain summary without jargon, so here it is in one place.",
    "{author} spent several weekends in {place} testing the advice below, keeping careful notes along "
    "the way.",
)
PLACES: tuple[str, ...] = (
    "Bristol",
    "Toronto",
    "Melbourne",
    "Dublin",
    "Cape Town",
    "Portland",
    "Edinburgh",
    "Wellington",
    "Vancouver",
    "Leeds",
    "Adelaide",
    "Cork",
    "Halifax",
    "Brighton",
    "Denver",
    "Auckland",
)

# Sentences used by the near-duplicate generator to swap one sentence of a copied article.
SWAP_SENTENCES: tuple[str, ...] = (
    "Several readers have written in with their own experiences, and most of them agree.",
    "It is worth trying this more than once before deciding whether it suits you.",
    "The details vary from place to place, but the principle stays the same.",
    "None of this requires expensive equipment or special training.",
    "A little patience at the start saves a great deal of trouble later on.",
)

# Generic asides the generator may add to a pool paragraph. Each article gets its own variant of every
# paragraph it uses (a sentence or two dropped, an aside added), because trafilatura's deduplicate
# option drops any paragraph it has already seen a few times in the same process, and a pool paragraph
# repeated verbatim across dozens of pages would be cut from most of them.
ASIDES: tuple[str, ...] = (
    "In practice, the habit matters more than the details.",
    "Most people find that the second attempt goes far more smoothly than the first.",
    "It helps to keep a short written note of what worked and what did not.",
    "Friends and neighbours are often the best source of local advice.",
    "There is no single right answer, only a sensible place to begin.",
    "The first results usually appear sooner than expected.",
    "Small adjustments made early tend to have the largest effect.",
    "Experienced practitioners still repeat these basics every season.",
    "A library book or a short evening class can fill in the remaining gaps.",
    "Mistakes along the way are part of the process and rarely permanent.",
    "The same advice applies whether you live in a city flat or a country house.",
    "Keeping expectations modest makes the whole experience more enjoyable.",
    "Costs stay low as long as you resist buying everything at once.",
    "Writing down a simple plan before starting saves a surprising amount of time.",
    "The rewards grow steadily the longer you keep at it.",
)

# Non-English pools: language code -> paragraphs. The texts avoid characters missing from the legacy
# charsets the generator uses (latin-1 for German and Portuguese, windows-1252 for French and Italian,
# latin-2 for Polish, koi8-r for Russian, gbk for Chinese, shift_jis and euc-jp for Japanese).
OTHER: dict[str, tuple[str, ...]] = {
    "de": (
        "Wer im Frühling einen Gemüsegarten anlegen möchte, sollte zuerst den Boden prüfen. Ein lockerer, "
        "humusreicher Boden speichert Wasser besser und lässt die Wurzeln tief wachsen. Schwere Lehmböden "
        "lassen sich mit reifem Kompost und etwas Sand verbessern. Danach lohnt sich ein einfacher Plan, "
        "auf dem man notiert, welche Pflanzen wo stehen, damit man im nächsten Jahr die Beete wechseln "
        "kann.",
        "Die Bahnfahrt von München nach Innsbruck gehört zu den schönsten Strecken in den Alpen. Schon "
        "kurz hinter Rosenheim tauchen die ersten Berge auf, und bei klarem Wetter sieht man die "
        "schneebedeckten Gipfel über dem Inntal. Viele Reisende steigen unterwegs aus, um eine kleine "
        "Wanderung zu machen, und fahren am Nachmittag mit dem nächsten Zug weiter.",
        "Ein gutes Brot braucht vor allem Zeit. Wer den Teig über Nacht im Kühlschrank ruhen lässt, "
        "erhält eine kräftige Kruste und eine feine, gleichmäßige Krume. Mehl, Wasser, Salz und ein wenig "
        "Hefe reichen völlig aus. Wichtig ist, den Ofen lange genug vorzuheizen und in den ersten Minuten "
        "für ausreichend Dampf zu sorgen.",
        "Viele Menschen unterschätzen, wie sehr regelmäßige Bewegung die Stimmung verbessert. Schon ein "
        "Spaziergang von zwanzig Minuten an der frischen Luft kann Stress abbauen und den Schlaf "
        "fördern. Es muss kein anstrengendes Training sein. Entscheidend ist, dass man die Bewegung in "
        "den Alltag einbaut, etwa auf dem Weg zur Arbeit oder in der Mittagspause.",
        "Die Geschichte der Hanse zeigt, wie eng die Städte an Nord- und Ostsee im Mittelalter "
        "miteinander verbunden waren. Kaufleute aus Lübeck, Hamburg und Danzig handelten mit Salz, "
        "Getreide, Holz und Stoffen. Gemeinsame Regeln und Privilegien schützten ihre Geschäfte in "
        "fremden Häfen. Noch heute erinnern die Backsteinkirchen und Speicherhäuser an diese Zeit.",
        "Beim Programmieren hilft es, große Aufgaben in kleine, überprüfbare Schritte zu zerlegen. Jeder "
        "Schritt sollte sich mit einem Test absichern lassen, bevor man den nächsten beginnt. So bleibt "
        "der Code verständlich, und Fehler fallen früh auf. Außerdem fällt es dem ganzen Team leichter, "
        "Änderungen zu prüfen und nachzuvollziehen.",
        "Ein Haushaltsbuch klingt altmodisch, ist aber eines der wirksamsten Werkzeuge für die eigenen "
        "Finanzen. Wer drei Monate lang alle Ausgaben notiert, erkennt schnell, wohin das Geld wirklich "
        "fließt. Oft sind es nicht die großen Anschaffungen, sondern viele kleine Beträge, die am "
        "Monatsende fehlen.",
    ),
    "fr": (
        "Le marché du samedi matin est un rituel pour beaucoup d'habitants du quartier. On y trouve des "
        "légumes de saison, des fromages affinés dans la région et du pain encore tiède. Les marchands "
        "connaissent leurs clients par leur prénom et donnent volontiers des conseils pour préparer un "
        "plat. C'est aussi l'occasion de prendre un café en terrasse avec des amis.",
        "Pour réussir une pâte à crêpes, il faut surtout la laisser reposer. Mélangez la farine, les oeufs "
        "et une pincée de sel, puis ajoutez le lait petit à petit pour éviter les grumeaux. Une heure au "
        "frais suffit pour que la pâte devienne plus souple. Faites chauffer une poêle légèrement beurrée "
        "et versez juste assez de pâte pour couvrir le fond.",
        "La randonnée en montagne demande un peu de préparation. Avant de partir, il est prudent de "
        "consulter la météo, de prévenir quelqu'un de son itinéraire et d'emporter assez d'eau. De bonnes "
        "chaussures et une veste imperméable sont indispensables, même en été. Au sommet, la vue sur les "
        "vallées récompense largement l'effort de la montée.",
        "L'histoire des cathédrales gothiques raconte l'ambition de villes entières. Leur construction "
        "durait souvent plus d'un siècle, et plusieurs générations d'artisans se succédaient sur le "
        "chantier. Les grandes verrières permettaient à la lumière d'entrer largement dans la nef. "
        "Aujourd'hui encore, les visiteurs lèvent les yeux avec admiration vers ces voûtes immenses.",
        "Dormir suffisamment est essentiel pour la santé, mais beaucoup de gens négligent leur sommeil. "
        "Se coucher à heure régulière, éviter les écrans avant de dormir et garder la chambre fraîche "
        "sont des habitudes simples et efficaces. Une courte sieste en début d'après-midi peut aussi "
        "aider, à condition qu'elle ne dépasse pas une vingtaine de minutes.",
        "Le jardinage sur un balcon est tout à fait possible, même en ville. Les herbes aromatiques comme "
        "le thym, le basilic et la menthe poussent bien en pot et demandent peu d'entretien. Il suffit de "
        "choisir un emplacement ensoleillé et d'arroser régulièrement. En quelques semaines, on peut "
        "déjà cueillir de quoi parfumer ses plats.",
        "Apprendre à programmer ne demande pas de talent particulier, mais de la patience et de la "
        "régularité. Il vaut mieux écrire un petit programme chaque jour que lire des dizaines de "
        "tutoriels sans pratiquer. Les erreurs font partie de l'apprentissage, car chacune d'elles "
        "apprend quelque chose sur le fonctionnement de la machine.",
    ),
    "es": (
        "Preparar una buena paella requiere paciencia y un fuego constante. Primero se dora la carne en "
        "una sartén ancha con aceite de oliva, después se añaden las verduras y el tomate rallado. Cuando "
        "el sofrito está listo, se incorpora el arroz, el caldo caliente y una pizca de azafrán. A partir "
        "de ese momento no se debe remover, para que se forme el socarrat en el fondo.",
        "Viajar en tren por el norte de España permite descubrir paisajes verdes y pueblos junto al mar. "
        "Las estaciones pequeñas conservan su encanto antiguo y los trayectos son tranquilos. Muchos "
        "viajeros aprovechan para leer, mirar por la ventana o conversar con otros pasajeros. Al llegar, "
        "siempre hay un bar cerca donde probar la comida local.",
        "El ejercicio regular no tiene que ser intenso para ser útil. Caminar a paso ligero media hora al "
        "día mejora la circulación, fortalece el corazón y ayuda a dormir mejor. Lo importante es la "
        "constancia. Si se convierte en un hábito, como ir andando al trabajo, resulta mucho más fácil "
        "mantenerlo durante años.",
        "La historia de las ciudades mediterráneas está llena de intercambios. Comerciantes, marineros y "
        "viajeros llevaron de un puerto a otro productos, ideas y palabras nuevas. Por eso en muchas "
        "lenguas de la región se encuentran términos de origen árabe, griego o latino. Pasear por un "
        "casco antiguo es como leer un libro de historia abierto.",
        "Ahorrar una parte fija del sueldo cada mes es una de las decisiones financieras más sensatas. "
        "Conviene hacerlo de forma automática, justo después de cobrar, para no tener la tentación de "
        "gastarlo. Un pequeño fondo de emergencia evita muchos disgustos cuando surge una avería o un "
        "gasto inesperado.",
        "En el huerto, los tomates necesitan sol, agua regular y un buen tutor. Es mejor regar por la "
        "mañana y evitar mojar las hojas, porque la humedad favorece las enfermedades. Quitar los brotes "
        "que salen entre el tallo y las ramas ayuda a que la planta concentre su energía en los frutos. "
        "En verano, la cosecha suele ser abundante.",
        "Aprender un idioma nuevo abre puertas inesperadas. Además de facilitar los viajes, permite leer "
        "libros en su versión original y entender mejor otras culturas. Dedicar unos minutos cada día es "
        "más eficaz que estudiar muchas horas de vez en cuando. Hablar con nativos, aunque se cometan "
        "errores, acelera mucho el progreso.",
    ),
    "it": (
        "La pasta fatta in casa richiede pochi ingredienti, ma molta attenzione. Si dispone la farina a "
        "fontana sulla spianatoia, si rompono le uova al centro e si impasta fino a ottenere un panetto "
        "liscio ed elastico. Dopo mezz'ora di riposo si stende la sfoglia con il mattarello. Tagliatelle, "
        "lasagne e ravioli nascono tutti da questo semplice gesto.",
        "Visitare le colline toscane in autunno è un'esperienza indimenticabile. Le vigne cambiano "
        "colore, i borghi si preparano alla vendemmia e nelle trattorie si servono piatti a base di "
        "funghi e castagne. Conviene muoversi con calma, fermandosi nei paesi più piccoli, dove i ritmi "
        "sono lenti e le persone hanno tempo per raccontare.",
        "La storia di Venezia è legata al mare fin dalle origini. La città costruita sulla laguna divenne "
        "una potenza commerciale, capace di controllare rotte verso l'Oriente per secoli. I suoi "
        "palazzi, le chiese e i canali testimoniano ancora oggi quella ricchezza. Ogni anno milioni di "
        "visitatori percorrono le sue calli strette.",
        "Dormire bene è fondamentale per la salute del corpo e della mente. Andare a letto sempre alla "
        "stessa ora, evitare cene troppo pesanti e spegnere il telefono prima di dormire sono abitudini "
        "semplici. Anche una breve passeggiata serale può aiutare a rilassarsi dopo una giornata intensa.",
        "Nell'orto di casa, il basilico cresce facilmente se riceve sole e acqua con regolarità. È utile "
        "cimare le punte prima della fioritura, così la pianta diventa più folta e profumata. Le foglie "
        "raccolte al mattino hanno il sapore migliore. Con un po' di olio e pinoli diventano subito un "
        "pesto fresco.",
        "Chi inizia a correre dovrebbe procedere con gradualità. Alternare qualche minuto di corsa a "
        "qualche minuto di cammino permette al corpo di abituarsi senza traumi. Dopo alcune settimane si "
        "riesce a correre più a lungo senza fermarsi. Scarpe adatte e un buon riscaldamento riducono il "
        "rischio di infortuni.",
    ),
    "pt": (
        "O pão de queijo é uma das receitas mais queridas do Brasil. A massa é feita com polvilho, leite, "
        "óleo, ovos e queijo ralado, e fica macia por dentro e levemente crocante por fora. Muitas "
        "famílias têm a sua própria versão, passada de geração em geração. Servido quente com café, é "
        "perfeito para o lanche da tarde.",
        "Lisboa é uma cidade para ser explorada a pé, apesar das suas muitas colinas. Os elétricos "
        "antigos sobem ruas estreitas entre casas cobertas de azulejos, e os miradouros oferecem vistas "
        "largas sobre o rio Tejo. No fim da tarde, as esplanadas enchem-se de gente que conversa com "
        "calma enquanto o sol se põe.",
        "Poupar dinheiro não significa deixar de viver bem. Com um orçamento simples, é possível "
        "perceber para onde vai o dinheiro e cortar gastos que não trazem alegria. Separar uma pequena "
        "quantia todos os meses cria uma reserva para imprevistos e traz mais tranquilidade para o "
        "futuro.",
        "As grandes navegações dos séculos quinze e dezasseis mudaram a forma como os europeus viam o "
        "mundo. Os navegadores portugueses desenvolveram novas técnicas de navegação e mapas mais "
        "precisos. As viagens eram longas e perigosas, mas abriram rotas comerciais que ligaram "
        "continentes distantes.",
        "Beber água suficiente ao longo do dia é um hábito simples e importante. Muitas vezes, o cansaço "
        "e a dor de cabeça são sinais de desidratação. Ter sempre uma garrafa por perto ajuda a lembrar "
        "de beber. Frutas como a melancia e a laranja também contribuem para a hidratação.",
        "Plantar ervas aromáticas em casa é fácil e compensador. Salsa, coentros e hortelã crescem bem em "
        "vasos junto a uma janela luminosa. Basta regar com moderação e cortar as folhas com frequência "
        "para estimular novos rebentos. Assim há sempre tempero fresco na cozinha.",
    ),
    "nl": (
        "Fietsen is in Nederland meer dan een manier om van de ene plek naar de andere te komen. Kinderen "
        "leren het al op jonge leeftijd, en veel mensen fietsen elke dag naar school, naar hun werk of naar "
        "een café in de buurt. "
        "Brede fietspaden, duidelijke verkeersregels en korte afstanden maken het aantrekkelijk. Zelfs "
        "bij regen en wind zie je overal fietsers op straat.",
        "Een goede erwtensoep moet zo dik zijn dat de lepel erin blijft staan. De soep wordt gemaakt van "
        "spliterwten, prei, wortel, knolselderij en een stuk rookworst. Ze smaakt het best als ze een dag "
        "heeft gestaan. Op koude winterdagen is er weinig dat zo goed verwarmt als een kom zelfgemaakte "
        "soep.",
        "De geschiedenis van de Nederlandse polders laat zien hoe mensen eeuwenlang tegen het water "
        "hebben gestreden. Met dijken, molens en later gemalen werd land gewonnen op meren en zee. Dat "
        "vraagt tot op de dag van vandaag zorgvuldig onderhoud. Waterschappen behoren daarom tot de "
        "oudste bestuursvormen van het land.",
        "Wie een moestuin begint, doet er goed aan klein te starten. Een paar vierkante meter is genoeg "
        "om sla, radijs en bonen te kweken. Door elk jaar de gewassen te wisselen, blijft de grond "
        "gezond. Met compost en een laag mulch houdt de bodem vocht vast en groeit er minder onkruid.",
        "Regelmatig bewegen hoeft niet ingewikkeld te zijn. Een half uur wandelen of fietsen per dag "
        "helpt al om fit te blijven. Het is handig om beweging te koppelen aan vaste momenten, zoals de "
        "weg naar het werk of een wandeling na het eten. Zo wordt het vanzelf een gewoonte.",
        "Bij het schrijven van software is goede documentatie net zo belangrijk als de code zelf. Eén "
        "korte uitleg over het waarom van een keuze bespaart collega's later veel tijd. Houd de "
        "documentatie dicht bij de code en werk haar bij wanneer het gedrag verandert. Zo blijft ze "
        "betrouwbaar.",
    ),
    "ru": (
        "Зимой в деревне жизнь идёт медленно и спокойно. Утром нужно растопить печь, принести воды из "
        "колодца и расчистить дорожки от снега. Днём солнце ярко светит на белые поля, а вечером соседи "
        "собираются за чаем и рассказывают истории. Многие горожане приезжают сюда на выходные, чтобы "
        "отдохнуть от шума и суеты.",
        "Хороший борщ готовят не спеша. Сначала варят бульон, затем добавляют свёклу, капусту, морковь и "
        "картофель. Важно сохранить яркий цвет свёклы, поэтому её часто тушат отдельно с небольшим "
        "количеством уксуса. Подают борщ со сметаной и свежим чёрным хлебом. На следующий день он "
        "становится ещё вкуснее.",
        "История Санкт-Петербурга началась в начале восемнадцатого века на болотистых берегах Невы. Город "
        "строили по чёткому плану, с широкими проспектами, каналами и набережными. Сегодня его дворцы, "
        "мосты и музеи привлекают путешественников со всего мира. Особенно красиво здесь летом, во время "
        "белых ночей.",
    ),
    "zh": (
        "春天是种植蔬菜的好时节。先把土地翻松，加入腐熟的堆肥，让土壤更加肥沃。西红柿、黄瓜和豆角都"
        "比较容易种植，只要每天有充足的阳光，并且按时浇水，几个星期后就能看到明显的生长。收获自己种的"
        "蔬菜，会让人感到特别满足。",
        "坐火车旅行可以慢慢欣赏沿途的风景。列车穿过田野、河流和山区，窗外的景色不断变化。很多人喜欢"
        "在车上看书、聊天或者品尝当地的小吃。与乘坐飞机相比，火车旅行更加轻松，也更容易了解一个地方"
        "的生活。",
        "保持良好的睡眠习惯对健康非常重要。每天尽量在同一时间睡觉和起床，睡前少看手机，卧室保持安静"
        "和凉爽。白天适量运动，也有助于晚上更快入睡。如果长期睡不好，最好及时向医生咨询。",
    ),
    "ja": (
        "日本の家庭料理では、だしがとても大切にされています。昆布とかつお節から丁寧にとっただしは、味噌"
        "汁や煮物の味を深くしてくれます。忙しい日には顆粒のだしを使う人も多いですが、時間のある週末に"
        "自分でだしをとると、その違いに驚くでしょう。",
        "京都を訪れるなら、朝早く出かけるのがおすすめです。人の少ない時間に寺や神社を歩くと、静かな雰"
        "囲気を楽しむことができます。昼になると観光客が増えるので、その前に有名な場所を回り、午後は小"
        "さな路地や商店街をゆっくり散策すると良いでしょう。",
        "毎日少しずつ運動を続けることは、健康を保つための基本です。特別な道具がなくても、散歩や階段の"
        "上り下りで十分な効果があります。大切なのは無理をせず、自分のペースで長く続けることです。",
    ),
    "pl": (
        "Jesień w polskich górach to doskonały czas na wędrówki. Szlaki są mniej zatłoczone niż latem, a "
        "lasy mienią się kolorami czerwieni i złota. Warto wyruszyć wcześnie rano, zabrać ciepłą kurtkę "
        "i termos z herbatą. Po zejściu ze szlaku najlepiej smakuje talerz gorącej zupy w schronisku.",
        "Pierogi to jedno z najbardziej lubianych dań w Polsce. Ciasto przygotowuje się z mąki, wody i "
        "odrobiny soli, a farsz może być bardzo różny: z ziemniakami i serem, z kapustą i grzybami albo "
        "z owocami. W wielu domach lepienie pierogów to rodzinna tradycja, zwłaszcza przed świętami.",
        "Regularne oszczędzanie nie wymaga dużych dochodów, tylko konsekwencji. Dobrym sposobem jest "
        "ustawienie stałego przelewu na konto oszczędnościowe zaraz po wypłacie. Nawet niewielka kwota "
        "odkładana co miesiąc po kilku latach tworzy poważną rezerwę na nieprzewidziane wydatki.",
    ),
}

# Site chrome per language: navigation labels, a cookie notice, "read more" and a rights line. Kept in
# the same charsets as the prose above so legacy-encoded pages encode cleanly.
UI: dict[str, dict[str, str | tuple[str, ...]]] = {
    "en": {
        "nav": ("Home", "News", "Guides", "Reviews", "About", "Contact"),
        "cookie": "We use cookies to improve your experience and to measure traffic. By continuing to "
        "browse this site you agree to our use of cookies.",
        "accept": "Accept all",
        "more": "Read more",
        "rights": "All rights reserved.",
        "privacy": "Privacy policy",
        "related": "Related articles",
        "search": "Search",
    },
    "de": {
        "nav": ("Startseite", "Aktuelles", "Ratgeber", "Rezepte", "Über uns", "Kontakt"),
        "cookie": "Diese Website verwendet Cookies, um die Nutzung zu analysieren.",
        "accept": "Alle akzeptieren",
        "more": "Weiterlesen",
        "rights": "Alle Rechte vorbehalten.",
        "privacy": "Datenschutz",
        "related": "Das könnte Sie auch interessieren",
        "search": "Suche",
    },
    "fr": {
        "nav": ("Accueil", "Actualités", "Recettes", "Voyages", "À propos", "Contact"),
        "cookie": "Ce site utilise des cookies pour mesurer l'audience.",
        "accept": "Tout accepter",
        "more": "Lire la suite",
        "rights": "Tous droits réservés.",
        "privacy": "Politique de confidentialité",
        "related": "À lire aussi",
        "search": "Rechercher",
    },
    "es": {
        "nav": ("Inicio", "Noticias", "Recetas", "Viajes", "Sobre nosotros", "Contacto"),
        "cookie": "Este sitio utiliza cookies para analizar el tráfico.",
        "accept": "Aceptar todo",
        "more": "Leer más",
        "rights": "Todos los derechos reservados.",
        "privacy": "Política de privacidad",
        "related": "Artículos relacionados",
        "search": "Buscar",
    },
    "it": {
        "nav": ("Home", "Notizie", "Ricette", "Viaggi", "Chi siamo", "Contatti"),
        "cookie": "Questo sito utilizza cookie per analizzare il traffico.",
        "accept": "Accetta tutto",
        "more": "Leggi di più",
        "rights": "Tutti i diritti riservati.",
        "privacy": "Informativa sulla privacy",
        "related": "Articoli correlati",
        "search": "Cerca",
    },
    "pt": {
        "nav": ("Início", "Notícias", "Receitas", "Viagens", "Sobre", "Contacto"),
        "cookie": "Este site utiliza cookies para analisar o tráfego.",
        "accept": "Aceitar tudo",
        "more": "Ler mais",
        "rights": "Todos os direitos reservados.",
        "privacy": "Política de privacidade",
        "related": "Artigos relacionados",
        "search": "Pesquisar",
    },
    "nl": {
        "nav": ("Home", "Nieuws", "Recepten", "Reizen", "Over ons", "Contact"),
        "cookie": "Deze website gebruikt cookies om het verkeer te analyseren.",
        "accept": "Alles accepteren",
        "more": "Lees verder",
        "rights": "Alle rechten voorbehouden.",
        "privacy": "Privacybeleid",
        "related": "Gerelateerde artikelen",
        "search": "Zoeken",
    },
    "ru": {
        "nav": ("Главная", "Новости", "Рецепты", "Путешествия", "О нас", "Контакты"),
        "cookie": "Этот сайт использует файлы cookie для анализа посещаемости.",
        "accept": "Принять",
        "more": "Читать далее",
        "rights": "Все права защищены.",
        "privacy": "Политика конфиденциальности",
        "related": "Читайте также",
        "search": "Поиск",
    },
    "zh": {
        "nav": ("首页", "新闻", "生活", "旅行", "关于我们", "联系我们"),
        "cookie": "本网站使用 cookie 来分析访问量。",
        "accept": "全部接受",
        "more": "阅读全文",
        "rights": "版权所有。",
        "privacy": "隐私政策",
        "related": "相关文章",
        "search": "搜索",
    },
    "ja": {
        "nav": ("ホーム", "ニュース", "料理", "旅行", "会社概要", "お問い合わせ"),
        "cookie": "このサイトではアクセス解析のために cookie を使用しています。",
        "accept": "同意する",
        "more": "続きを読む",
        "rights": "無断転載を禁じます。",
        "privacy": "プライバシーポリシー",
        "related": "関連記事",
        "search": "検索",
    },
    "pl": {
        "nav": ("Strona główna", "Aktualności", "Przepisy", "Podróże", "O nas", "Kontakt"),
        "cookie": "Ta strona używa plików cookie do analizy ruchu.",
        "accept": "Akceptuję",
        "more": "Czytaj dalej",
        "rights": "Wszelkie prawa zastrzeżone.",
        "privacy": "Polityka prywatności",
        "related": "Zobacz także",
        "search": "Szukaj",
    },
}
