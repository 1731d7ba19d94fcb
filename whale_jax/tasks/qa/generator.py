"""A seeded world of fictional entities: a passage corpus and one- and two-hop questions.

Countries, cities, companies and people, each with a one-word invented name (e.g. "Talvek")
and a few attributes, each described by one short passage titled with its name. A one-hop
question asks for an attribute stated in the passage of the entity it names; a two-hop
question names an entity whose passage leads (through a "bridge" entity) to the passage that
holds the answer. Every passage repeats its entity's name and uses the same verbs as the
questions about it, so BM25 with the question as query ranks the right passage first
(tests check this for every question).

  corpus, questions = synthetic_qa.generate_world(seed=0)
  corpus[0]   == {"id": "d0", "title": "Talvek", "text": "Talvek is a country. ..."}
  questions[0] == {"id": "synthetic:0", "question": "...", "golden_answers": ["..."],
                   "supporting_ids": ["d5", "d1"], "hops": 2}

Names are short and distinct, and the passages use a small fixed vocabulary, so a tiny model
with a word-level vocabulary can learn the domain.
"""
import random

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
PROFESSIONS = ("chemist", "painter", "pilot", "farmer", "baker", "sailor", "doctor", "judge",
               "poet", "miner", "tailor", "singer")
INDUSTRIES = ("shipping", "mining", "textile", "software", "brewing", "railway", "insurance",
              "glass", "paper", "steel")
LANGUAGES = ("Orvish", "Telmic", "Sarnese", "Brandic", "Quellan", "Dovric", "Minthic", "Zarese")
FIRST_YEAR, LAST_YEAR = 1700, 1999


def _names(random_state, count):
  """`count` distinct capitalized two-syllable names such as "Talvek"."""
  names = set()
  while len(names) < count:
    syllables = [random_state.choice(CONSONANTS) + random_state.choice(VOWELS) +
                 random_state.choice(CONSONANTS) for _ in range(2)]
    names.add("".join(syllables).capitalize())
  names = sorted(names)
  random_state.shuffle(names)
  return names


def generate_world(seed=0, num_countries=6, num_cities=24, num_companies=24, num_people=96):
  """(corpus, questions) for one seeded world.

  Returns:
    corpus: [{"id", "title", "text"}], one passage per entity.
    questions: [{"id", "question", "golden_answers", "supporting_ids", "hops"}]; the
      supporting ids list the passages to read, in hop order.
  """
  if min(num_countries, num_cities, num_companies, num_people) < 1:
    raise ValueError("generate_world needs at least one entity of each kind; got "
                     f"num_countries={num_countries}, num_cities={num_cities}, "
                     f"num_companies={num_companies}, num_people={num_people}.")
  if num_countries > len(LANGUAGES):
    raise ValueError(f"num_countries={num_countries} exceeds the {len(LANGUAGES)} languages; "
                     f"use at most {len(LANGUAGES)} countries.")
  random_state = random.Random(seed)
  names = iter(_names(random_state, num_countries + num_cities + num_companies + num_people))
  countries = [{"name": next(names), "language": LANGUAGES[i]} for i in range(num_countries)]
  cities = [{"name": next(names), "country": countries[i % num_countries]["name"]
             if i < num_countries else random_state.choice(countries)["name"],
             "year": random_state.randint(FIRST_YEAR, LAST_YEAR)} for i in range(num_cities)]
  people = [{"name": next(names), "profession": random_state.choice(PROFESSIONS),
             "city": random_state.choice(cities)["name"],
             "year": random_state.randint(FIRST_YEAR, LAST_YEAR)}
            for _ in range(num_people)]
  founders = random_state.sample(people, min(num_companies, num_people))
  companies = [{"name": next(names), "industry": random_state.choice(INDUSTRIES),
                "city": random_state.choice(cities)["name"],
                "founder": founders[i % len(founders)]["name"],
                "year": random_state.randint(FIRST_YEAR, LAST_YEAR)} for i in range(num_companies)]
  for person in people:
    person["company"] = random_state.choice(companies)["name"]

  corpus, passage_id = [], {}

  def add(name, text):
    passage_id[name] = f"d{len(corpus)}"
    corpus.append({"id": passage_id[name], "title": name, "text": text})

  for country in countries:
    add(country["name"], f"{country['name']} is a country. The main language of "
        f"{country['name']} is {country['language']}.")
  for city in cities:
    add(city["name"], f"{city['name']} is a city in the country {city['country']}. "
        f"{city['name']} was founded in {city['year']}.")
  for company in companies:
    article = "an" if company["industry"][0] in VOWELS else "a"
    add(company["name"], f"{company['name']} is {article} {company['industry']} company. "
        f"{company['name']} is headquartered in {company['city']}. {company['name']} was "
        f"founded by {company['founder']} in {company['year']}.")
  for person in people:
    article = "an" if person["profession"][0] in VOWELS else "a"
    add(person["name"], f"{person['name']} is {article} {person['profession']}. "
        f"{person['name']} was born in {person['city']} in {person['year']}. "
        f"{person['name']} works for {person['company']}.")

  by_name = {entity["name"]: entity for entity in countries + cities + companies + people}
  questions = []

  def ask(text, answer, *names):
    questions.append({"id": f"synthetic:{len(questions)}", "question": text,
                      "golden_answers": [str(answer)],
                      "supporting_ids": [passage_id[name] for name in names],
                      "hops": len(names)})

  for country in countries:
    ask(f"What is the main language of {country['name']}?", country["language"],
        country["name"])
  for city in cities:
    ask(f"In which country is the city {city['name']}?", city["country"], city["name"])
    ask(f"In which year was {city['name']} founded?", city["year"], city["name"])
  for company in companies:
    ask(f"Who founded the company {company['name']}?", company["founder"], company["name"])
    ask(f"Where is {company['name']} headquartered?", company["city"], company["name"])
    ask(f"In which country is {company['name']} headquartered?",
        by_name[company["city"]]["country"], company["name"], company["city"])
    ask(f"Where was the founder of {company['name']} born?",
        by_name[company["founder"]]["city"], company["name"], company["founder"])
  for person in people:
    ask(f"What is the profession of {person['name']}?", person["profession"], person["name"])
    ask(f"Where was {person['name']} born?", person["city"], person["name"])
    ask(f"In which year was {person['name']} born?", person["year"], person["name"])
    ask(f"Which company does {person['name']} work for?", person["company"], person["name"])
    ask(f"In which country was {person['name']} born?", by_name[person["city"]]["country"],
        person["name"], person["city"])
    ask(f"In which year was the birthplace of {person['name']} founded?",
        by_name[person["city"]]["year"], person["name"], person["city"])
    ask(f"Where is the company that {person['name']} works for headquartered?",
        by_name[person["company"]]["city"], person["name"], person["company"])
  return corpus, questions
