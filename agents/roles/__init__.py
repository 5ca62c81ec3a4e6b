"""The agent team's roles: planner, coder and debugger, one small module each.

``agents.roles.planner.plan``, ``agents.roles.coder.code`` and ``agents.roles.debugger.debug``
each take the one path of ``agents.roles.answer``: render their prompt from ``prompts/``, call
the LLM client once at the role's temperature and read the reply into a record
(``agents.roles.records``) or a recorded ``RoleFailure``. A role module holds only what is its
own: its prompt's values and how its reply is read.
Nothing is imported here: ``agents.contract`` and ``agents.context`` use the renderer in this
package, and the role modules use them.
"""
