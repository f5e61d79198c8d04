# goodput's RPM: the agent's system user, its state directory and a token
# for the mesh (made once; copy it to every host of a mesh).
getent group goodput >/dev/null || groupadd -r goodput
getent passwd goodput >/dev/null || useradd -r -g goodput -d /var/lib/goodput -s /sbin/nologin \
    -c "goodput measurement agent" goodput
install -d -o goodput -g goodput -m 0750 /var/lib/goodput
if [ ! -e /etc/goodput/token ]; then
    /usr/bin/goodput agent --new-token --out /etc/goodput/token >/dev/null
    chgrp goodput /etc/goodput/token
    chmod 0640 /etc/goodput/token
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
