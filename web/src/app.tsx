// The shell: a tab bar (Chat, Studio, Memory) routed by the URL hash.
//
// Key design choice: Memory is mounted only while shown (it polls the ledger),
// while Chat and Studio stay mounted (hidden) once visited, so a reply keeps
// streaming and media jobs keep being followed across tab switches. The API
// key prompt sits outside the shell, which is inert while the prompt is open.
// A tab's click shows its panel at once (the hash follows by the link's default
// action): waiting for the asynchronous `hashchange` left a key pressed right after
// the click, such as Enter in the chat box, going to a still hidden view.
import { useEffect, useState } from 'preact/hooks';
import { gate } from './auth';
import { ApiKeyButton, ApiKeyDialog, useGate } from './components/api-key';
import { ChatView } from './views/chat';
import { StudioView } from './views/studio';
import { MemoryView } from './views/memory';

type Tab = 'chat' | 'studio' | 'memory';
const TABS: { id: Tab; label: string }[] = [
  { id: 'chat', label: 'Chat' },
  { id: 'studio', label: 'Studio' },
  { id: 'memory', label: 'Memory' },
];

function fromHash(): Tab {
  const h = location.hash.replace(/^#\/?/, '');
  return (TABS.find((t) => t.id === h)?.id ?? 'chat') as Tab;
}

export function App() {
  const [tab, setTab] = useState<Tab>(fromHash());
  const [studioSeen, setStudioSeen] = useState(tab === 'studio');
  const auth = useGate(gate);
  useEffect(() => {
    if (tab === 'studio') setStudioSeen(true);
  }, [tab]);
  useEffect(() => {
    const on = () => setTab(fromHash());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return (
    <>
    <div class="shell" inert={auth.open || undefined} aria-hidden={auth.open || undefined}>
      <header class="topbar">
        <span class="brand" aria-label="Favlo">
          favlo
        </span>
        <nav aria-label="Views">
          <ul class="tabs" role="tablist">
            {TABS.map((t) => (
              <li key={t.id} role="presentation">
                <a
                  role="tab"
                  id={`tab-${t.id}`}
                  href={`#${t.id}`}
                  aria-selected={tab === t.id}
                  aria-controls={`panel-${t.id}`}
                  onClick={(e) => {
                    // A plain click (a modified one opens the link elsewhere).
                    if (e.button === 0 && !(e.metaKey || e.ctrlKey || e.shiftKey || e.altKey)) setTab(t.id);
                  }}
                  class={tab === t.id ? 'tab active' : 'tab'}
                >
                  {t.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <ApiKeyButton gate={gate} />
      </header>
      <main>
        <section id="panel-chat" role="tabpanel" aria-labelledby="tab-chat" hidden={tab !== 'chat'} class="panel">
          <ChatView active={tab === 'chat'} />
        </section>
        {(studioSeen || tab === 'studio') && (
          <section id="panel-studio" role="tabpanel" aria-labelledby="tab-studio" hidden={tab !== 'studio'} class="panel">
            <StudioView />
          </section>
        )}
        {tab === 'memory' && (
          <section id="panel-memory" role="tabpanel" aria-labelledby="tab-memory" class="panel">
            <MemoryView />
          </section>
        )}
      </main>
    </div>
    <ApiKeyDialog gate={gate} />
    </>
  );
}
