# The students' JupyterHub single-user image: the student's install of the course (docs/students.md), nothing of
# the grader or the service, nbgrader's instructor tools off, and the exchange's two settings.
# Build from the repository root, with the one wheel the students get in dist/ (.dockerignore lets it in):
#   .venv/bin/pip wheel --no-deps -w dist .
#   docker build -f autograder/jupyterhub-singleuser.Dockerfile -t autograd-course-student \
#     --build-arg COURSE_ID=autograd-course --build-arg EXCHANGE_ROOT=/srv/nbgrader/exchange .
# JupyterHub spawns it (KubeSpawner's or DockerSpawner's `image`), with the exchange mounted at EXCHANGE_ROOT.
# `autograd-course check` runs a notebook in its sandbox, bubblewrap in a user namespace, only where the container
# may mount a new /proc (podman: --security-opt unmask=/proc/*); with the engine's defaults it says so and runs
# nothing (docs/gradescope-and-containers.md).
FROM python:3.11-slim

# The CPU build of torch (PyPI's pulls gigabytes of CUDA); an empty value means plain PyPI.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG COURSE_ID=autograd-course
ARG EXCHANGE_ROOT=/srv/nbgrader/exchange

# A venv, as a student's own install has it: its sys.prefix is where pip puts Jupyter's configuration, so the
# `--sys-prefix` commands below turn nbgrader's instructor tools off whatever Python the base image has.
ENV PATH=/opt/venv/bin:$PATH
COPY dist/autograd_course-*.whl /tmp/wheels/
COPY autograder/check-torch-index /tmp/
# The wheel's own dependencies are pinned in its pyproject.toml; JupyterHub's single-user server is pinned here.
# The lab plugins are also locked: JupyterLab lets a user re-enable in its settings a plugin that is only disabled.
# hadolint ignore=DL3013
RUN set -- /tmp/wheels/autograd_course-*.whl \
    && if [ "$#" -ne 1 ]; then echo "error: dist/ holds $# autograd_course wheels ($*); leave only the one" \
       "to install" >&2; exit 1; fi \
    && python3 /tmp/check-torch-index "${TORCH_INDEX_URL}" \
    && python3 -m venv /opt/venv \
    && pip install --no-cache-dir ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} \
       "$1" jupyterhub==6.1.1 \
    && jupyter labextension disable --level=sys_prefix @jupyter/nbgrader:formgrader \
       @jupyter/nbgrader:create-assignment @jupyter/nbgrader:course-list \
    && jupyter labextension lock --level=sys_prefix @jupyter/nbgrader:formgrader \
       @jupyter/nbgrader:create-assignment @jupyter/nbgrader:course-list \
    && jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader \
       nbgrader.server_extensions.course_list \
    && mkdir -p /etc/jupyter \
    && printf 'c.CourseDirectory.course_id = "%s"\nc.Exchange.root = "%s"\n' "${COURSE_ID}" "${EXCHANGE_ROOT}" \
       > /etc/jupyter/nbgrader_config.py \
    && rm -rf /tmp/wheels /tmp/check-torch-index \
    && useradd --create-home --uid 1000 --shell /bin/bash jovyan

USER 1000
WORKDIR /home/jovyan
EXPOSE 8888
CMD ["jupyterhub-singleuser"]
