"""Everything that turns results into text or HTML: terminal lines, Markdown, the console, report views and templates.

Importing the package imports none of its modules."""
