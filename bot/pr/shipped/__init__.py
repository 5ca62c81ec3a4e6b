"""Code that the follow-up pull request ships into the user's repository: ``bot.pr.dropin``
joins these modules' shipped parts into one runtime file beside the drop-ins, which import it.
Real modules, so that they are linted, typed and tested here; kernelpilot's own process never
runs them (they run where the user's model runs, with torch and the standard library alone)."""
