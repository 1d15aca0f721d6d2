"""``scrapy genspider``: Scrapy's own command, which also knows this package's templates.

``COMMANDS_MODULE = "crawler.commands"`` makes it the project's ``genspider``. A template
name is looked up as a file first (``-t path/to/mine.tmpl``), then in
``crawler/templates/spiders/`` (``fleet``: a spider whose requests may travel between the
workers, with contracts for ``scrapy check``), then in Scrapy's templates or the project's
``TEMPLATES_DIR`` (``basic``, ``crawl``, ...). ``scrapy genspider -l`` lists both.

Templates get one variable more than Scrapy's: ``$hostname``, the URL's host without its
port, which is what ``allowed_domains`` takes (``$domain`` keeps the port).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy.commands.genspider import Command as ScrapyGenspider

#: this package's spider templates, ahead of Scrapy's
TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "spiders"


def template_file(template: str) -> Path | None:
    """This package's template named *template* (``fleet`` or ``fleet.tmpl``), if any."""
    name = template if template.endswith(".tmpl") else f"{template}.tmpl"
    if Path(name).name != name:  # a path: the user's own file, for Scrapy to find
        return None
    found = TEMPLATES / name
    return found if found.is_file() else None


def ours() -> list[str]:
    """The names of this package's templates."""
    return sorted(p.stem for p in TEMPLATES.glob("*.tmpl"))


class Command(ScrapyGenspider):
    def _find_template(self, template: str) -> Path | None:
        name = template if template.endswith(".tmpl") else f"{template}.tmpl"
        if Path(name).exists():  # Scrapy's first rule: a file there is the template
            return super()._find_template(template)
        return template_file(name) or super()._find_template(template)

    def _list_templates(self) -> None:
        mine = ours()
        theirs = sorted(p.stem for p in Path(self.templates_dir).glob("*.tmpl"))
        names = mine + [t for t in theirs if t not in mine]
        print("Available templates:\n" + "\n".join(f"  {name}" for name in names))

    def _generate_template_variables(self, module: str, name: str, url: str,
                                     template_name: str) -> dict[str, Any]:
        variables = super()._generate_template_variables(module, name, url, template_name)
        variables["hostname"] = urlsplit(url).hostname or variables["domain"]
        return variables
