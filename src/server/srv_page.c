/* srv_page — the chat page served at GET / (plain HTML + JS, no external
 * assets): keeps the conversation, POSTs it to /v1/chat/completions with
 * stream=true and renders the SSE deltas as they arrive. */

const char srv_chat_page[] =
    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>vllm.c chat</title>\n"
    "<style>body{font-family:sans-serif;max-width:48em;margin:1em auto}#log div{white-space:pre-wrap;"
    "margin:.4em 0;padding:.4em;border-radius:4px}.user{background:#e8f0fe}.assistant{background:#f1f3f4}"
    ".error{background:#fde8e8}#f{display:flex;gap:.5em}#msg{flex:1}</style></head><body>\n"
    "<h3>vllm.c chat</h3><div id=\"log\"></div>\n"
    "<form id=\"f\"><input id=\"msg\" autocomplete=\"off\" placeholder=\"Say something\">"
    "<input id=\"key\" type=\"password\" placeholder=\"API key (optional)\" size=\"12\">"
    "<button id=\"send\">Send</button></form>\n"
    "<script>\n"
    "const log=document.getElementById('log'),msg=document.getElementById('msg');let conv=[];\n"
    "function add(cls,t){const d=document.createElement('div');d.className=cls;d.textContent=t;"
    "log.appendChild(d);return d;}\n"
    "document.getElementById('f').onsubmit=async e=>{e.preventDefault();const t=msg.value.trim();if(!t)return;\n"
    " msg.value='';add('user',t);conv.push({role:'user',content:t});const out=add('assistant','');\n"
    " const h={'Content-Type':'application/json'};const k=document.getElementById('key').value;"
    "if(k)h['Authorization']='Bearer '+k;\n"
    " try{const r=await fetch('/v1/chat/completions',{method:'POST',headers:h,body:JSON.stringify("
    "{messages:conv,stream:true,max_tokens:+(new URLSearchParams(location.search).get('max_tokens'))||256})});\n"
    "  if(!r.ok){const j=await r.json();out.className='error';out.textContent=j.error?j.error.message:r.status;"
    "conv.pop();return;}\n"
    "  const rd=r.body.getReader(),dec=new TextDecoder();let buf='',text='';\n"
    "  for(;;){const {value,done}=await rd.read();if(done)break;buf+=dec.decode(value,{stream:true});\n"
    "   let i;while((i=buf.indexOf('\\n\\n'))>=0){const ev=buf.slice(0,i);buf=buf.slice(i+2);\n"
    "    if(!ev.startsWith('data: '))continue;const d=ev.slice(6);if(d==='[DONE]')continue;\n"
    "    const j=JSON.parse(d);if(j.error){out.className='error';out.textContent=j.error.message;continue;}\n"
    "    for(const c of j.choices){const dl=c.delta||{};if(dl.content){text+=dl.content;out.textContent=text;}}}}\n"
    "  conv.push({role:'assistant',content:text});\n"
    " }catch(err){out.className='error';out.textContent=String(err);conv.pop();}};\n"
    "</script></body></html>\n";
